"""Requests that hold text Postgres cannot store are refused before anything is written (I16).

A NUL or an unpaired surrogate in the path, the query or anywhere in a JSON body (keys included) gets
422 naming the field, as FastAPI names fields; a body larger than the API takes gets 413. A JSON body
nested deeper than `MAX_DEPTH` levels gets 422 naming `body`, before anything parses it: on every
route, the signed entry points included, before any signature is checked. A body that is not JSON goes
on, for the route to refuse in its own words. On the A2A endpoint each refusal is a JSON-RPC error
(`a2a_refusals`).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.datastructures import QueryParams
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ticketiq.entries import a2a_refusals
from ticketiq.values.json_depth import MAX_DEPTH, too_deep
from ticketiq.values.storable import is_storable, storable, unstorable_at

# The largest request body the API reads: a run's input is at most 100,000 characters.
MAX_BODY_BYTES = 1 << 20
UNSTORABLE = "holds text that cannot be stored (a NUL character or an unpaired surrogate); remove it"
TOO_DEEP = f"the JSON is nested deeper than {MAX_DEPTH} levels; no request of this API nests that deep"


def _refuse(status: int, loc: list[Any], message: str, kind: str = "unstorable_text") -> JSONResponse:
    # The location names the field as sent, with what cannot be stored shown as U+FFFD.
    shown = [storable(part)[0] if isinstance(part, str) else part for part in loc]
    return JSONResponse({"detail": [{"loc": shown, "msg": message, "type": kind}]}, status_code=status)


def where_unstorable(path: str, query: QueryParams, body: Any) -> list[Any] | None:
    """The location of the first text Postgres cannot store, as FastAPI would name the field."""
    if not is_storable(path):
        return ["path"]
    for name, value in query.multi_items():
        if not is_storable(name) or not is_storable(value):
            return ["query", name]
    found = unstorable_at(body)
    return None if found is None else ["body", *found]


def refusal_of(scope: Scope, body: bytes) -> Response | None:
    """The refusal of a request whose body or address cannot be taken, as its endpoint speaks; None when
    it goes on. The depth is judged before anything parses the body."""
    if too_deep(body):
        return a2a_refusals.in_kind(scope, _refuse(422, ["body"], TOO_DEEP, a2a_refusals.TOO_DEEP))
    try:
        parsed = _parsed(body)
        bad = where_unstorable(scope["path"], QueryParams(scope["query_string"]), parsed)
    except RecursionError:  # the last guard: `too_deep` refuses whatever could get here
        return a2a_refusals.in_kind(scope, _refuse(422, ["body"], TOO_DEEP, a2a_refusals.TOO_DEEP))
    if bad is None:
        return None
    return a2a_refusals.in_kind(scope, _refuse(422, bad, UNSTORABLE), a2a_refusals.request_id(parsed))


def has_body(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether a request says it sends a body (HTTP/1.1: a length above 0, or chunks; RFC 9112 6.3)."""
    for name, value in headers:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() not in (b"0", b"")):
            return True
    return False


def _parsed(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None  # not JSON: the route refuses it in its own words


class StorableText:
    """Pure ASGI middleware: reads the body once, checks it, and hands the same bytes on."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not has_body(scope["headers"]):
            # No body to read, walk or hand on (a GET, mostly): only its address is checked.
            bad = where_unstorable(scope["path"], QueryParams(scope["query_string"]), None)
            if bad is not None:
                await a2a_refusals.in_kind(scope, _refuse(422, bad, UNSTORABLE))(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                large = _refuse(413, ["body"], f"the body is larger than {MAX_BODY_BYTES} bytes", "too_large")
                await a2a_refusals.in_kind(scope, large)(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        refused = refusal_of(scope, body)
        if refused is not None:
            await refused(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)
