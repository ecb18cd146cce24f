"""Jira Cloud ticket events: `POST /v1/ticket-events`, the target of a Jira webhook configured with a
secret (TICKETIQ_JIRA_WEBHOOK_SECRET).

Authenticated by its signature, not our bearer token (`auth.SIGNED_PATHS`): `X-Hub-Signature:
sha256=<hex HMAC-SHA256 of the raw body>`; anything else is 401 and stores nothing. A signed event
needs `X-Atlassian-Webhook-Identifier` and a JSON body with `webhookEvent` and `issue.key` (400 when
the body is not JSON, 422 naming the field). Each agent whose agents-file entry lists the event in
`on_ticket_events` is started once per event identifier, on the `ticket_event` channel, asked about the
issue by key. Answered 202 with the runs, those of an earlier delivery of the event included; an event
no agent opted in to is 202 with none. The same signed body under another identifier (Jira does not sign
that header) is one event (I19): 202 with the runs of the identifier it first came with, starting none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ticketiq.auth.webhook_signature import HUB_HEADER
from ticketiq.engine.engine import Engine
from ticketiq.entries.hooks import unsigned
from ticketiq.intake.ticket_events import IDENTIFIER_HEADER
from ticketiq.intake.triggers import TicketIntake, Unsigned
from ticketiq.storage.trigger_store import TriggerStore


class EventAccepted(BaseModel):
    run_ids: list[str] = Field(description="The event's runs, one per agent that opted in for it.")
    runs: dict[str, str] = Field(description="The same, by agent.")


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    @router.post(
        "/v1/ticket-events", status_code=202, response_model=EventAccepted,
        responses={401: {"description": "Not signed with TICKETIQ_JIRA_WEBHOOK_SECRET."}},
    )  # fmt: skip
    async def receive(
        request: Request,
        identifier: Annotated[str | None, Header(alias=IDENTIFIER_HEADER)] = None,
        signature: Annotated[str | None, Header(alias=HUB_HEADER)] = None,
    ) -> EventAccepted | JSONResponse:
        body = await request.body()  # the raw body, as signed
        eng = engine(request)
        try:
            runs = await TicketIntake(eng, TriggerStore(eng.deps.db)).receive(identifier, signature, body)
        except Unsigned as exc:
            return unsigned(exc)
        return EventAccepted(run_ids=list(runs.values()), runs=runs)
