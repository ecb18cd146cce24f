"""Webhook triggers: declared by an admin, delivered to by anyone holding one of their secrets.

- `POST /v1/triggers {name, agent, secret}` (admin; Idempotency-Key): declares a trigger with its
  first secret, 201.
- `GET /v1/triggers` (admin): every trigger, its secrets' numbers and lifetimes; never a secret.
- `POST /v1/triggers/{name}/secrets {secret, expire_others_in_s?}` (admin; Idempotency-Key): a rotation.
  The new secret is active at once beside the one in use (at most two are active); with
  `expire_others_in_s` the others stop being accepted that long from now, else they stay until retired.
- `DELETE /v1/triggers/{name}/secrets/{n}` (admin): retires secret n at once (never the last active one).
- `POST /v1/hooks/{name}` (signed): a delivery, 202 `{run_id}`.

A delivery authenticates by its signature, not our bearer token (`auth.SIGNED_PATHS`): `X-TicketIQ-Signature:
t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` with an active secret, within 5 minutes of
now, and `X-TicketIQ-Delivery: <id>`. A missing, malformed, stale or wrong signature and an unknown
trigger all get the same 401 (an unsigned caller learns nothing of which triggers exist) and store
nothing. A delivery id seen before answers 202 with the first delivery's run and starts nothing. The
same signed request (trigger, t, body) under another delivery id is a replay (I19): 409 naming
`header.X-TicketIQ-Signature`, with the first delivery's `run_id`; it stores and starts nothing.

Both creating POSTs, retried with their Idempotency-Key after the process died between making the thing
and keeping the key's answer, answer what the first one made (201): the trigger and the secret carry a
key derived from the token and the Idempotency-Key.

Secrets are read from the body without FastAPI's validation, whose 422 would echo the body back.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, Path, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.auth.webhook_signature import DELIVERY_HEADER, SIGNATURE_HEADER
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.errors import RequestError
from ticketiq.intake import webhook_triggers
from ticketiq.intake.triggers import Replayed, Triggers, Unsigned
from ticketiq.storage.trigger_store import TriggerShown, TriggerStore

TriggerAdmin = Annotated[Principal, Depends(requires(Permission.MANAGE_TRIGGERS))]
M = TypeVar("M", bound=BaseModel)


class TriggerRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="1 to 100 letters, digits, '.', '_', '-', '@'; the path of its deliveries.")
    agent: str = Field(description="The agent each delivery starts.")
    secret: str = Field(description="16 to 512 printable ASCII characters, e.g. `openssl rand -hex 32`.")


class SecretRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    secret: str = Field(description="The next secret, active at once beside the one in use.")
    expire_others_in_s: float | None = Field(
        default=None, ge=0, le=webhook_triggers.MAX_OVERLAP_S,
        description="The secrets active until now stop being accepted this many seconds from now; unset: "
                    "they stay until retired.",
    )  # fmt: skip


class SecretOut(BaseModel):
    n: int
    active: bool
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    retired_at: datetime | None
    retired_by: str | None


class TriggerOut(BaseModel):
    name: str
    agent: str
    url: str = Field(description="Where its deliveries go.")
    created_by: str
    created_at: datetime
    secrets: list[SecretOut] = Field(description="Numbers and lifetimes only: a secret is never shown.")


class DeliveryAccepted(BaseModel):
    run_id: str


def _out(trigger: TriggerShown) -> TriggerOut:
    secrets = [SecretOut(n=s.n, active=s.active, created_by=s.created_by, created_at=s.created_at,
                         expires_at=s.expires_at, retired_at=s.retired_at, retired_by=s.retired_by)
               for s in trigger.secrets]  # fmt: skip
    return TriggerOut(name=trigger.name, agent=trigger.agent, url=f"/v1/hooks/{trigger.name}",
                      created_by=trigger.created_by, created_at=trigger.created_at, secrets=secrets)  # fmt: skip


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    schema = {"content": {"application/json": {"schema": model.model_json_schema()}}, "required": True}
    return {"requestBody": schema}


async def _parsed(request: Request, model: type[M]) -> M:
    """The body as `model`; a 422 naming the field, never quoting what was sent (it holds a secret)."""
    try:
        data = json.loads(await request.body())
    except ValueError:
        raise RequestError("body", "the body is not JSON") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_input=False, include_url=False)[0]
        raise RequestError(".".join(["body", *map(str, first["loc"])]), first["msg"]) from None


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def triggers(request: Request) -> Triggers:
        eng = engine(request)
        return Triggers(eng, TriggerStore(eng.deps.db))

    @router.post("/v1/triggers", status_code=201, response_model=TriggerOut, openapi_extra=_documented(TriggerRequest))
    async def declare(request: Request, admin: TriggerAdmin, idempotency_key: IdempotencyKey) -> Response:
        body = await _parsed(request, TriggerRequest)
        keys = engine(request).deps.keys
        # The key is bound to the request, the secret by a keyed fingerprint: no plain hash of it is kept.
        asked = {"name": body.name, "agent": body.agent, "secret": webhook_triggers.fingerprint(keys, body.secret)}

        async def made() -> TriggerOut:
            key = None if idempotency_key is None else f"POST /v1/triggers\n{idempotency_key}"
            return _out(await triggers(request).declare(body.name, body.agent, body.secret, admin.name, key))

        return await once(request, "POST /v1/triggers", admin, idempotency_key, asked, made)

    @router.get("/v1/triggers")
    async def every(request: Request, _: TriggerAdmin) -> dict[str, list[TriggerOut]]:
        return {"triggers": [_out(t) for t in await triggers(request).every()]}

    @router.post(
        "/v1/triggers/{name}/secrets", status_code=201, response_model=TriggerOut,
        openapi_extra=_documented(SecretRequest),
    )  # fmt: skip
    async def add_secret(name: str, request: Request, admin: TriggerAdmin, idempotency_key: IdempotencyKey) -> Response:
        body = await _parsed(request, SecretRequest)
        keys = engine(request).deps.keys
        asked = {"name": name, "secret": webhook_triggers.fingerprint(keys, body.secret),
                 "expire_others_in_s": body.expire_others_in_s}  # fmt: skip

        async def added() -> TriggerOut:
            key = None if idempotency_key is None else f"POST /v1/triggers/{{name}}/secrets\n{idempotency_key}"
            shown = await triggers(request).add_secret(name, body.secret, body.expire_others_in_s, admin.name, key)
            return _out(shown)

        return await once(request, "POST /v1/triggers/{name}/secrets", admin, idempotency_key, asked, added)

    @router.delete("/v1/triggers/{name}/secrets/{n}")
    async def retire(
        name: str, n: Annotated[int, Path(ge=1, le=2**31 - 1)], request: Request, admin: TriggerAdmin
    ) -> TriggerOut:
        return _out(await triggers(request).retire_secret(name, n, admin.name))

    @router.post(
        "/v1/hooks/{name}", status_code=202, response_model=DeliveryAccepted,
        responses={
            401: {"description": "Not signed by an active secret of a trigger by this name, or stale."},
            409: {"description": "The same signed request was delivered already under another delivery id."},
        },
    )  # fmt: skip
    async def deliver(
        name: str,
        request: Request,
        delivery: Annotated[str | None, Header(alias=DELIVERY_HEADER)] = None,
        signature: Annotated[str | None, Header(alias=SIGNATURE_HEADER)] = None,
    ) -> DeliveryAccepted | JSONResponse:
        # The raw body, as signed: never parsed before the signature is checked.
        body = await request.body()
        try:
            delivered = await triggers(request).deliver(name, delivery, signature, body)
        except Unsigned as exc:
            return unsigned(exc)
        except Replayed as exc:
            detail = [{"loc": exc.field.split("."), "msg": exc.message}]
            return JSONResponse({"detail": detail, "run_id": exc.run_id}, status_code=exc.status)
        return DeliveryAccepted(run_id=delivered.run_id)


def unsigned(exc: Unsigned) -> JSONResponse:
    """The 401 a request without a valid signature gets (with the challenge RFC 9110 asks for)."""
    return JSONResponse(
        {"detail": [{"loc": exc.field.split("."), "msg": exc.message}]},
        status_code=401,
        headers={"WWW-Authenticate": 'HMAC-SHA256 realm="ticketiq"'},
    )
