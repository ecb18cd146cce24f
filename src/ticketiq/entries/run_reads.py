"""`GET /v1/runs/{id}` without a wait, answered before FastAPI routes the request.

A client's poll of a run is the request the API serves most. Through FastAPI it pays for routing, the
`requires` dependency solved, the path's UUID and the query validated by pydantic: a quarter of the
request's CPU, more than its one statement's share (`bench/http_path.py`). `RunReads` answers the plain
case itself, as a pure ASGI middleware just inside `BearerAuth` (so the request is authenticated, traced and
guarded exactly as every other), and hands everything else to the route: a query string of any kind (a
`wait` among them), an id that is not a UUID in its canonical form, a principal whose role may not read
runs, a run not found or not the principal's, a database error. Those answers (403, 404, 422, 503) are the
route's own, so this answers only 200, with the same view (`RunViews.shown_run`) written by the same
`json_answer`. The route stays the API's description, and the answer of an app served without this.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.entries.auth import route_path
from ticketiq.entries.json_answer import json_answer
from ticketiq.errors import StorageError

_PREFIX = "/v1/runs/"
_ID_LENGTH = 36  # a UUID's canonical text: 8-4-4-4-12 hex digits


def plain_run_id(path: str, query: bytes) -> str | None:
    """The run id of a plain `GET /v1/runs/{id}` this may answer: the path's id in its canonical (lower-case,
    hyphenated) text and no query string; None for any other request, which the route answers."""
    if query or len(path) != len(_PREFIX) + _ID_LENGTH or not path.startswith(_PREFIX):
        return None
    text = path[len(_PREFIX) :]
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        return None
    canonical = str(parsed)
    return canonical if canonical == text else None


class RunReads:
    """Pure ASGI middleware: a plain `GET /v1/runs/{id}` its principal may read answered 200 here; every
    other request goes on to the app unchanged."""

    def __init__(self, app: ASGIApp, views: Callable[[Scope], Any]) -> None:
        self.app = app
        self.views = views  # the app's RunViews, read from the scope as the request comes (set at start)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        shown = await self._shown(scope) if scope["type"] == "http" and scope["method"] == "GET" else None
        if shown is None:
            await self.app(scope, receive, send)
            return
        await json_answer(shown)(scope, receive, send)

    async def _shown(self, scope: Scope) -> dict[str, Any] | None:
        run_id = plain_run_id(route_path(scope), scope["query_string"])
        principal: Principal | None = scope.get("state", {}).get("principal")
        if run_id is None or principal is None or tokens.refusal(principal, Permission.READ_OWN_RUNS) is not None:
            return None
        try:
            shown: dict[str, Any] | None = await self.views(scope).shown_run(run_id, tokens.run_scope(principal))
        except StorageError:
            return None  # the route reads again and answers the error as the app answers every one
        return shown
