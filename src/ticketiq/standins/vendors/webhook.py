"""Generic webhook target stand-in: accepts any JSON POST under /webhook/<path>.

It honours an `Idempotency-Key` header for a window that is an option (0 by default: it does not
dedupe at all, as most targets). Within the window a repeat gets the stored first response, and the
same key with a different body is refused 422, as the IETF Idempotency-Key draft has it.
"""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request, Response

from ticketiq.standins.records import Answer, Effect, Session, Write, fingerprint, jsonb
from ticketiq.standins.vendors.intake import IntakeDep, json_body

VENDOR = "webhook"


def router() -> APIRouter:
    api = APIRouter()

    @api.post("/{path:path}")
    async def deliver(path: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        key = request.headers.get("idempotency-key")
        write = Write(VENDOR, "post", path, key, body)

        async def apply(session: Session) -> Answer:
            delivery_id = uuid.uuid4().hex
            window = intake.options.webhook_dedupe_window_s
            if key and window > 0:
                claim = await session.claim(VENDOR, path, key, delivery_id, window, body)
                if not claim.won and claim.fingerprint != fingerprint(body):
                    return Answer(422, {"error": "Idempotency-Key was used with a different body"}, Effect.REFUSED)
                if not claim.won:
                    return Answer(200, {"received": True, "id": claim.ref}, Effect.DEDUPED, claim.ref)
            await session.fetch_one(
                "standin.webhook_delivery_insert",
                {"id": delivery_id, "path": path, "idempotency_key": key, "payload": jsonb(body)},
            )
            return Answer(200, {"received": True, "id": delivery_id}, Effect.APPLIED, delivery_id)

        return await intake.write(write, apply)

    return api
