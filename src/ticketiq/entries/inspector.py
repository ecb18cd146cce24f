"""The inspector's route: `POST /v1/inspector/calls {tool, args, tenant?}` (operator), a person's ad hoc
tool call (`intake/inspector.py` says what happens to it).

Answers: 200 for every call that was made, whatever its outcome (`ok`, or `error`, or `uncertain`:
the vendor left it open whether a write took effect). Not a 5xx: a client or proxy that retries on one
would send a write again, and an uncertain call is never sent again by anyone. 403 when a gate refused
it (nothing sent; `gate` names which, and the refusal is audited too); 422 naming `body.tool` or
`body.args.<field>` when the request is bad (nothing sent, nothing written).

Idempotency-Key honoured: a repeat gets the first answer; a retry after the first request's process
died (the key taken over) never sends a write the first one began: it answers the outcome on record
(without the result, which is not kept), or `uncertain` (I19).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.engine.seal import canonical
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.intake import webhook_triggers
from ticketiq.intake.inspector import DEFAULT_TENANT, Inspector

Operator = Annotated[Principal, Depends(requires(Permission.INSPECT))]
# The field a gate's refusal is about: a quarantined tenant is the request's tenant; the others its tool.
_REFUSED_FIELD = {"containment": "tenant"}


class InspectorCall(BaseModel):
    # No `by`: who made the call is the token's name, never a field a client asserts.
    model_config = ConfigDict(extra="forbid")
    tool: str = Field(min_length=1, max_length=200)
    args: dict[str, Any] = Field(default_factory=dict)
    tenant: str = Field(
        default=DEFAULT_TENANT, min_length=1, max_length=200, description="The tenant the call is contained as."
    )


class CallMade(BaseModel):
    tool: str
    key: str = Field(description="The idempotency key sent with the call: fresh per call.")
    ok: bool
    result: Any = None
    error: str | None = None
    uncertain: bool = Field(description="The vendor left it open whether the write took effect; never resent.")
    audit_id: int | None = Field(description="The `inspector.call` audit row; null only if it could not be written.")


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    @router.post("/v1/inspector/calls", response_model=CallMade, responses={403: {"description": "a gate refused"}})
    async def call(
        body: InspectorCall, request: Request, operator: Operator, idempotency_key: IdempotencyKey
    ) -> Response:
        async def make() -> dict[str, Any] | JSONResponse:
            inspector = Inspector(engine(request).deps)
            made = await inspector.call(body.tool, body.args, operator.name, body.tenant, idempotency_key)
            if made.refused is not None:
                field = _REFUSED_FIELD.get(made.refused.gate, "tool")
                return JSONResponse(
                    {"detail": [{"loc": ["body", field], "msg": made.refused.reason}], "gate": made.refused.gate,
                     "audit_id": made.audit_id},
                    status_code=403,
                )  # fmt: skip
            return made.shown()

        # The key is bound to the arguments by a keyed fingerprint: no plain hash of them (a secret among
        # them could be guessed against it) is kept.
        args = webhook_triggers.fingerprint(engine(request).deps.keys, canonical(body.args).decode())
        asked = {"tool": body.tool, "tenant": body.tenant, "args": args}
        return await once(request, "POST /v1/inspector/calls", operator, idempotency_key, asked, make)
