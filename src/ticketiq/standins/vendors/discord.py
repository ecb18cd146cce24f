"""Discord API v10 stand-in: channel messages, deduped by nonce per author when `enforce_nonce` is set.

The author is the bot the `Authorization: Bot <token>` header names: a repeat of a nonce by the same
author within the window (an option, 120 s by default; Discord says "the past few minutes") returns
the original message and creates none. Any channel id exists (Discord's are snowflakes; scripts and
trials may name channels plainly).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from fastapi import APIRouter, Request, Response

from ticketiq.standins.records import Answer, Effect, Row, Session, Write, iso
from ticketiq.standins.vendors.intake import IntakeDep, json_body

VENDOR = "discord"
NONCE_MAX = 25
_EPOCH_MS = 1_420_070_400_000


def router() -> APIRouter:
    api = APIRouter()

    @api.post("/channels/{channel_id}/messages")
    async def send(channel_id: str, request: Request, intake: IntakeDep) -> Response:
        body = await json_body(request)
        nonce = body.get("nonce") if isinstance(body, dict) else None
        author = _author(request)
        write = Write(VENDOR, "send_message", channel_id, None if nonce is None else str(nonce), body)

        async def apply(session: Session) -> Answer:
            if author is None:
                return _error(401, 0, "401: Unauthorized")
            problem = _message_problem(body)
            if problem is not None:
                return problem
            assert isinstance(body, dict)
            message_id = str(_snowflake())
            window = intake.options.discord_nonce_window_s
            if nonce is not None and body.get("enforce_nonce") is True and window > 0:
                claim = await session.claim(VENDOR, author, str(nonce), message_id, window, body)
                if not claim.won:
                    original = await session.fetch_one("standin.discord_message_get", {"id": int(claim.ref)})
                    assert original is not None  # inserted in the transaction that claimed it
                    return Answer(200, _message(original), Effect.DEDUPED, claim.ref)
            row = await session.fetch_one(
                "standin.discord_message_insert",
                {
                    "id": int(message_id),
                    "channel_id": channel_id,
                    "author_id": author,
                    "nonce": None if nonce is None else str(nonce),
                    "content": body.get("content") or "",
                },
            )
            assert row is not None
            return Answer(200, _message(row), Effect.APPLIED, message_id)

        return await intake.write(write, apply)

    @api.get("/channels/{channel_id}/messages")
    async def list_messages(channel_id: str, request: Request, intake: IntakeDep) -> Response:
        query = request.query_params

        async def answer() -> Answer:
            if _author(request) is None:
                return _error(401, 0, "401: Unauthorized")
            try:
                limit = min(max(int(query.get("limit", "50")), 1), 100)
                before = int(query["before"]) if "before" in query else None
                after = int(query["after"]) if "after" in query else None
            except ValueError:
                return _form_error("limit", "NUMBER_TYPE_COERCE", "Value is not int.")
            rows = await intake.store.fetch_all(
                "standin.discord_messages_list",
                {"channel_id": channel_id, "before": before, "after": after, "limit": limit},
            )
            return Answer(200, [_message(r) for r in rows])

        return await intake.read(VENDOR, "list_messages", answer)

    return api


def _author(request: Request) -> str | None:
    """The bot's user id, derived from its token so one token is always one author."""
    header = request.headers.get("authorization", "")
    if not header.startswith("Bot ") or not header[4:].strip():
        return None
    return str(int(hashlib.sha256(header[4:].strip().encode()).hexdigest()[:15], 16))


def _snowflake() -> int:
    return ((int(time.time() * 1000) - _EPOCH_MS) << 22) | secrets.randbits(22)


def _message_problem(body: Any) -> Answer | None:
    if not isinstance(body, dict):
        return _error(400, 50109, "The request body contains invalid JSON.")
    nonce = body.get("nonce")
    if nonce is not None and (not isinstance(nonce, str | int) or len(str(nonce)) > NONCE_MAX):
        return _form_error("nonce", "BASE_TYPE_BAD_LENGTH", f"Must be {NONCE_MAX} or fewer in length.")
    if not body.get("content") and not body.get("embeds"):
        return _error(400, 50006, "Cannot send an empty message")
    if len(str(body.get("content") or "")) > 2000:
        return _form_error("content", "BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")
    return None


def _error(status: int, code: int, message: str) -> Answer:
    return Answer(status, {"message": message, "code": code}, Effect.REFUSED)


def _form_error(field: str, code: str, message: str) -> Answer:
    errors = {field: {"_errors": [{"code": code, "message": message}]}}
    return Answer(400, {"code": 50035, "errors": errors, "message": "Invalid Form Body"}, Effect.REFUSED)


def _message(row: Row) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "type": 0,
        "channel_id": row["channel_id"],
        "content": row["content"],
        "author": {"id": row["author_id"], "username": "ticketiq", "discriminator": "0", "bot": True},
        "timestamp": iso(row["created_at"]),
        "edited_timestamp": None,
        "tts": False,
        "mention_everyone": False,
        "mentions": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "nonce": row["nonce"],
    }
