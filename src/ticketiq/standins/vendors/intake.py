"""The desk every stand-in request passes: injected faults, one transaction per write, the write log.

A vendor route turns its request into a `Write` (what it is about, the key it carried) and a function
that applies it inside a transaction and says what it came to; the desk records the write in the same
transaction, so the log never disagrees with the vendor state it describes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, cast

from fastapi import Depends, Request, Response

from ticketiq.standins.faults import Fault, FaultBook, refusal
from ticketiq.standins.records import Answer, Session, Store, Write

Apply = Callable[[Session], Awaitable[Answer]]


@dataclass
class StandinOptions:
    """How the stand-ins behave where the vendors leave it unstated, or where a test needs it short."""

    # What a repeated incident.io idempotency_key gets: the original incident (the default) or a 409.
    incidentio_repeat: Literal["original", "error"] = "original"
    # Discord states "the past few minutes" for nonce dedupe.
    discord_nonce_window_s: float = 120.0
    sqs_dedupe_window_s: float = 300.0
    # Reported, unconfirmed: a deduped SQS send returns the original MessageId. False: a fresh one.
    sqs_duplicate_returns_original: bool = True
    # How long the webhook target honours Idempotency-Key; 0: it does not dedupe at all.
    webhook_dedupe_window_s: float = 0.0
    # The remote A2A agent: how long a task works before it completes, and how long the agent takes to
    # answer a message with its task (a sender that dies meanwhile never learns the task's id).
    a2a_agent_work_ms: int = 300
    a2a_agent_accept_ms: int = 0
    # OpenAI fine-tuning (standins/fine_tuning.py): how long a job created now takes to end, and, when
    # set, the error message a job created now fails with once its files are validated.
    fine_tune_duration_s: float = 2.0
    fine_tune_failure: str | None = None
    # The Microsoft identity platform stand-in (vendors/botframework.py): how long the tokens it grants
    # now last (Entra ID: about an hour), and the channels its signing key is endorsed for (None: the key
    # carries no `endorsements` field).
    oauth_token_lifetime_s: int = 3599
    botframework_endorsements: list[str] | None = field(default_factory=lambda: ["msteams", "skype", "webchat"])
    # Jira's accounts (standins/vendors/jira.py): the Cloud API tokens by their account's email (Basic auth)
    # and the Data Center personal access tokens (Bearer). Both None: any credential is taken, as before
    # the stand-in knew accounts (most tests send a made-up token).
    jira_api_tokens: dict[str, str] | None = None
    jira_personal_tokens: list[str] | None = None
    # The MCP stand-in (/mcp): when set, a request without `Authorization: Bearer <mcp_token>` gets 401.
    mcp_token: str | None = None
    faults: list[Fault] = field(default_factory=list)


class Intake:
    """The app's state: its store, its options (changeable while it runs) and its pending faults."""

    def __init__(self, store: Store, options: StandinOptions) -> None:
        self.store = store
        self.options = options
        self.faults = FaultBook(options.faults)

    async def write(self, write: Write, apply: Apply) -> Response:
        return respond(await self.answer(write, apply))

    async def answer(self, write: Write, apply: Apply) -> Answer:
        """What the vendor answers `write`, faults included; the write is recorded whatever it came to. The
        MCP stand-in turns the answer into a tool result rather than an HTTP response."""
        fault = self.faults.take(write.vendor, write.operation)
        if fault is not None and fault.mode in ("429", "500"):
            refused = refusal(fault)
            await self.store.record(write, refused)
            return refused
        if fault is not None and fault.mode == "stall":
            await asyncio.sleep(fault.stall_s)
        async with self.store.transaction() as session:
            answer = await apply(session)
            await session.record(write, answer)
        if fault is not None and fault.mode == "hold":
            # Committed and logged before the wait: a client killed meanwhile left a landed write.
            await asyncio.sleep(fault.stall_s)
        if fault is not None and fault.mode == "500_after_apply":
            return refusal(fault)
        return answer

    async def read(self, vendor: str, operation: str, answer: Callable[[], Awaitable[Answer]]) -> Response:
        fault = self.faults.take(vendor, operation)
        if fault is not None and fault.mode not in ("stall", "hold"):
            return respond(refusal(fault))
        if fault is not None:
            await asyncio.sleep(fault.stall_s)
        return respond(await answer())


def respond(answer: Answer) -> Response:
    if answer.status == 204:
        return Response(status_code=204, headers=dict(answer.headers))
    # ASCII with escapes, as many real APIs answer: it also carries text no UTF-8 encoder takes (a lone
    # surrogate such as "\ud83d"), which a vendor's JSON can hold and the engine must cope with.
    body = json.dumps(answer.body, ensure_ascii=True, separators=(",", ":")).encode()
    return Response(body, status_code=answer.status, headers=dict(answer.headers), media_type="application/json")


def _intake(request: Request) -> Intake:
    return cast(Intake, request.app.state.intake)


IntakeDep = Annotated[Intake, Depends(_intake)]


async def json_body(request: Request) -> Any:
    """The request's JSON, or its raw text when it is not JSON (a route then refuses it by its shape)."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", errors="replace")


def has_auth(request: Request) -> bool:
    return bool(request.headers.get("authorization", "").strip())
