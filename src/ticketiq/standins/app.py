"""The stand-ins' app: the scripted model and every vendor on one port, each under its own prefix.

    /v1                      model (OpenAI chat completions)        ticketiq.standins.model
    /v1/files, /v1/fine_tuning/jobs   OpenAI files and fine-tuning    ticketiq.standins.fine_tuning
    /incidentio              incident.io v2 (+ /v1 severities and statuses)
    /jira                    Jira Cloud v3
    /teams                   Bot Framework connector (replies)
    /graph/v1.0              Microsoft Graph (channel thread replies)
    /discord/api/v10         Discord
    /sqs                     SQS, AWS JSON 1.0 protocol
    /webhook/<path>          a generic webhook target
    /a2a-agent               a remote A2A agent (JSON-RPC; card at /a2a-agent/.well-known/agent-card.json)
    /mcp                     an MCP server (Streamable HTTP, stateful sessions): a notebook of notes with a
                             read, an idempotent, a destructive and a plain write tool (vendors/mcp_notes.py;
                             the same over stdio: python -m ticketiq.standins.mcp_stdio); option mcp_token
                             asks for `Authorization: Bearer <token>`
    /_standin/botframework   the Bot Framework token service: JWKS and a token mint (vendors/botframework.py)
    /login                   the Microsoft identity platform's token endpoint (client credentials) for the
                             bot's own tokens, which /teams and /graph/v1.0 check (vendors/botframework.py)

Admin routes under /_standin: `GET writes` (filters vendor, operation, target, key, effect),
`GET|POST|DELETE faults`, `GET|POST options`, `GET health`, `POST jira/projects/{key}/generate`,
`POST mcp/forget` (drops every MCP session) and `POST mcp/extra-tool` ({"enabled": bool}: the extra tool
archive_note, announced by notifications/tools/list_changed), vendors/mcp_endpoint.py.
The engine never imports this package.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, FastAPI, Query, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.dbserver.embedded import EmbeddedServer
from ticketiq.dbserver.watch import ServerWatch
from ticketiq.standins import fine_tuning
from ticketiq.standins.faults import Fault
from ticketiq.standins.model import create_router
from ticketiq.standins.records import CLIENT, TRACEPARENT, Store, iso
from ticketiq.standins.vendors import (
    a2a_agent,
    botframework,
    discord,
    incidentio,
    jira,
    mcp_endpoint,
    sqs,
    teams,
    webhook,
)
from ticketiq.standins.vendors.intake import Intake, IntakeDep, StandinOptions

__all__ = ["StandinOptions", "create_app"]


class OptionsPatch(BaseModel):
    """A change to a running stand-in's options: only the fields given change."""

    model_config = ConfigDict(extra="forbid")

    incidentio_repeat: Literal["original", "error"] | None = None
    discord_nonce_window_s: float | None = None
    sqs_dedupe_window_s: float | None = None
    sqs_duplicate_returns_original: bool | None = None
    webhook_dedupe_window_s: float | None = None
    a2a_agent_work_ms: int | None = None
    a2a_agent_accept_ms: int | None = None
    fine_tune_duration_s: float | None = None
    # "" clears it: jobs created from then on succeed.
    fine_tune_failure: str | None = None
    oauth_token_lifetime_s: int | None = Field(default=None, ge=1, le=86400)
    botframework_endorsements: list[str] | None = None
    jira_api_tokens: dict[str, str] | None = None
    jira_personal_tokens: list[str] | None = None
    # "" clears it: /mcp is open again.
    mcp_token: str | None = None


def create_app(
    db_url: str,
    *,
    model_latency_ms: int = 0,
    position_ids: bool = False,
    options: StandinOptions | None = None,
    server: EmbeddedServer | None = None,
    own_scripts: Path | None = None,
) -> FastAPI:
    """`server`: the embedded server `db_url` is on, when it is that of the stand-ins' home; they watch
    it as an app process does, and start it again if it is killed. `own_scripts`: a folder of model
    scripts of your own, besides the shipped ones (`ticketiq standins --scripts`)."""
    store = Store(db_url)
    intake = Intake(store, options or StandinOptions())
    remote_agent = a2a_agent.RemoteAgent(intake)
    mcp = mcp_endpoint.McpEndpoint(intake)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        watch = ServerWatch(server) if server is not None else None
        if watch is not None:
            watch.start()
        try:
            await store.open()
            try:
                async with mcp.running():  # its sessions end (held calls too) before the store closes
                    yield
            finally:
                await remote_agent.aclose()  # its tasks at work stop before their store closes
                await store.close()
        finally:
            if watch is not None:
                await watch.stop()

    app = FastAPI(title="TicketIQ stand-ins", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.intake = intake
    app.state.mcp = mcp
    app.add_middleware(NoteClient)

    async def log_request(model: str, conversation: str, step: int) -> None:
        params = {"model": model, "conversation": conversation, "step": step, "client": CLIENT.get(),
                  "traceparent": TRACEPARENT.get()}  # fmt: skip
        await store.fetch_one("standin.record_model_request", params)

    app.include_router(create_router(model_latency_ms, position_ids, own_scripts=own_scripts, log_request=log_request))
    for prefix, router in VENDOR_ROUTERS:
        app.include_router(router, prefix=prefix)
    app.mount(a2a_agent.PREFIX, remote_agent.app())
    # A plain ASGI endpoint (not a function): Starlette hands it the request's scope as it is.
    app.router.routes.append(Route(mcp_endpoint.PATH, mcp, include_in_schema=False))
    # Its own each app: its signer keeps the key it read from this app's database.
    app.include_router(botframework.router(), prefix="/_standin/botframework")
    for prefix, router in ADMIN_ROUTERS:
        app.include_router(router, prefix=prefix)
    return app


class NoteClient:
    """Notes each request's User-Agent (CLIENT), recorded with its write: which process sent it; and its
    traceparent (TRACEPARENT): the span of the call that sent it. Plain
    ASGI, not BaseHTTPMiddleware, which would cancel a stalled write when its client hangs up; a real
    vendor applies it anyway, and so must the stand-in."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = Headers(scope=scope)
            CLIENT.set(headers.get("user-agent"))
            TRACEPARENT.set(headers.get("traceparent"))
        await self.app(scope, receive, send)


def _admin() -> APIRouter:
    api = APIRouter()

    @api.get("/health")
    async def health() -> dict[str, bool]:
        return {"ok": True}

    @api.get("/writes")
    async def writes(
        intake: IntakeDep,
        vendor: str | None = None,
        operation: str | None = None,
        target: str | None = None,
        key: str | None = None,
        effect: Literal["applied", "deduped", "refused"] | None = Query(default=None),
    ) -> list[dict[str, Any]]:
        rows = await intake.store.fetch_all(
            "standin.writes",
            {"vendor": vendor, "operation": operation, "target": target, "key": key, "effect": effect},
        )
        return [{**row, "received_at": iso(row["received_at"])} for row in rows]

    @api.get("/faults")
    async def pending_faults(intake: IntakeDep) -> list[Fault]:
        return intake.faults.pending()

    @api.post("/faults", status_code=201)
    async def add_fault(fault: Fault, intake: IntakeDep) -> list[Fault]:
        intake.faults.add(fault)
        return intake.faults.pending()

    @api.delete("/faults", status_code=204)
    async def clear_faults(intake: IntakeDep) -> Response:
        intake.faults.clear()
        return Response(status_code=204)

    @api.get("/options")
    async def show_options(intake: IntakeDep) -> dict[str, Any]:
        return _shown(intake)

    @api.post("/options")
    async def change_options(patch: OptionsPatch, intake: IntakeDep) -> dict[str, Any]:
        intake.options = dataclasses.replace(intake.options, **patch.model_dump(exclude_none=True))
        return _shown(intake)

    return api


def _shown(intake: Intake) -> dict[str, Any]:
    shown = dataclasses.asdict(intake.options)
    shown.pop("faults")  # start-time faults live on in /_standin/faults
    return shown


# The vendors' routes hold nothing of an app's (each finds its app's store through the request), so they
# are made once a process and every app includes them: making a route is the costly part (FastAPI reads
# each handler's signature and builds its models), and the tests make an app of stand-ins per test.
VENDOR_ROUTERS: list[tuple[str, APIRouter]] = [
    ("", fine_tuning.router()),
    ("/incidentio", incidentio.router()),
    ("/jira", jira.router()),
    ("/teams", teams.bot_router()),
    ("/graph/v1.0", teams.graph_router()),
    ("/discord/api/v10", discord.router()),
    ("/sqs", sqs.router()),
    ("/webhook", webhook.router()),
    ("/login", botframework.login_router()),
]
ADMIN_ROUTERS: list[tuple[str, APIRouter]] = [
    ("/_standin", _admin()),
    ("/_standin/jira", jira.admin_router()),
    ("/_standin/mcp", mcp_endpoint.admin_router()),
]
