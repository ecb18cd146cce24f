"""Co-pilot turns: a person asks an agent about a ticket and gets the answer inline.

`POST /v1/copilot/turns {agent, ticket, question}` (a caller token allowed that agent) starts a run on
the `copilot` channel and waits for its answer up to TICKETIQ_COPILOT_WAIT_S: answered in time, 200
with the answer; else 202 with the run id and where to read the answer. The answer is handed on as a
step of its own (I12): the run is `answered` with its answer kept, then `succeeded`; this route answers
the caller from the run's status, on whichever process the run ended. A turn whose process died is
resumed as any run (I13, while TICKETIQ_CRASH_RESUME_ENTRIES is true): its caller has hung up, so the
answer lands on the transcript.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine import run_keys
from ticketiq.engine.engine import TERMINAL
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.errors import Forbidden
from ticketiq.intake.idempotency import request_hash
from ticketiq.storage.rows import RunStatus
from ticketiq.views.runs import RunViews

CHANNEL = "copilot"


class TurnRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    ticket: str = Field(min_length=1, max_length=200, description="The ticket the question is about, e.g. OPS-12.")
    question: str = Field(min_length=1, max_length=100_000)


class TurnAnswered(BaseModel):
    run_id: str
    status: str = Field(description="succeeded, failed or stopped; 202 answers say running (or queued, answered).")
    answer: str | None = None
    error: str | None = None
    run: str = Field(description="Where the run, and its answer once there, can be read.")
    transcript: str


def turn_input(ticket: str, question: str) -> str:
    """What the agent is asked: the ticket named first, so tools and scripts find it."""
    return f"Ticket {ticket}: {question}"


def add_routes(router: APIRouter, views: Callable[[Request], RunViews]) -> None:
    @router.post(
        "/v1/copilot/turns",
        status_code=200,
        response_model=TurnAnswered,
        responses={202: {"model": TurnAnswered, "description": "Not answered within TICKETIQ_COPILOT_WAIT_S."}},
    )
    async def ask(
        body: TurnRequest,
        request: Request,
        caller: Annotated[Principal, Depends(requires(Permission.START_RUNS))],
        idempotency_key: IdempotencyKey,
    ) -> Response:
        refusal = tokens.start_refusal(caller, body.agent)
        if refusal is not None:
            raise Forbidden("body.agent", refusal)
        asked = body.model_dump(mode="json")
        seen = views(request)
        eng = seen.engine

        async def turn() -> TurnAnswered | JSONResponse:
            created = await eng.submit(
                body.agent, turn_input(body.ticket, body.question), may_wait=False, channel=CHANNEL,
                idempotency_key=run_keys.copilot(caller.name, idempotency_key) if idempotency_key else None,
                request_hash=request_hash(asked) if idempotency_key else None, actor=caller.name,
            )  # fmt: skip
            status = await _answer_within(seen, created.id, eng.deps.settings.copilot_wait_s)
            shown = _shown(created.id, status)
            if shown.status in TERMINAL:
                return shown
            return JSONResponse(shown.model_dump(), status_code=202)

        return await once(request, "POST /v1/copilot/turns", caller, idempotency_key, asked, turn)


async def _answer_within(views: RunViews, run_id: str, wait_s: float) -> RunStatus | None:
    deadline = time.monotonic() + wait_s
    status: RunStatus | None = None
    while True:
        left = max(0.0, deadline - time.monotonic())
        status = await views.wait_change(run_id, left, seen=status.status if status else None)
        if status is None or status.status in TERMINAL or left <= 0:
            return status


def _shown(run_id: str, status: RunStatus | None) -> TurnAnswered:
    fields: dict[str, Any] = {"status": "queued"} if status is None else {"status": status.status}
    if status is not None and status.status in TERMINAL:
        fields.update(answer=status.answer, error=status.error)
    return TurnAnswered(run_id=run_id, run=f"/v1/runs/{run_id}", transcript=f"/v1/runs/{run_id}/transcript", **fields)
