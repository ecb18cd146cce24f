"""`GET /v1/runs/{id}`, with or without `?wait=S`, answered before FastAPI routes the request.

A client's read of a run, a poll or a wait, is the request the API serves most. Through FastAPI it pays
for routing, the `requires` dependency solved, the path's UUID and the query validated by pydantic: a
quarter of the request's CPU, more than its one statement's share (`bench/http_path.py`). `RunReads`
answers the plain case itself, as a pure ASGI middleware just inside `BearerAuth` (so the request is
authenticated, traced and guarded exactly as every other), with the route's own answer (`run_answer`,
which the route calls too), and a database error as the app answers every one (`storage_refusal`).
Everything else goes on to the route untouched: a query but a plain `wait` (digits, at most `WAIT_MAX_S`),
an id not in its canonical text, a principal whose role may not read runs. The route stays the API's
description, and the answer of an app served without this.
"""

from __future__ import annotations

import logging
import re
import uuid

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.entries import run_wait
from ticketiq.entries.auth import route_path
from ticketiq.entries.json_answer import field_error, json_answer, storage_refusal
from ticketiq.errors import StorageError
from ticketiq.views.runs import RunViews

log = logging.getLogger(__name__)

_PREFIX = "/v1/runs/"
_ID_LENGTH = 36  # a UUID's canonical text: 8-4-4-4-12 hex digits
# The one query taken here: a wait in plain decimal digits (pydantic reads more forms; the route takes those).
_WAIT = re.compile(rb"wait=(\d{1,2}(?:\.\d{1,6})?)")


def read_asked(path: str, query: bytes) -> tuple[str, float] | None:
    """(run id, seconds to wait) of a `GET /v1/runs/{id}` this answers: the path's id in its canonical
    (lower-case, hyphenated) text and no query but a plain `wait` from 0 to WAIT_MAX_S (0: none). None for
    any other request, which the route answers."""
    if len(path) != len(_PREFIX) + _ID_LENGTH or not path.startswith(_PREFIX):
        return None
    wait_s = 0.0
    if query:
        asked = _WAIT.fullmatch(query)
        if asked is None or (wait_s := float(asked[1])) > run_wait.WAIT_MAX_S:
            return None
    text = path[len(_PREFIX) :]
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        return None
    return (text, wait_s) if str(parsed) == text else None


class RunReads:
    """Pure ASGI middleware: a `GET /v1/runs/{id}` (or `?wait=S`) answered here as the route answers it, from
    the app's state (`process`, `waiters`) as its routes read it; every other request goes on unchanged."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = await self._answer(scope, receive) if scope["type"] == "http" and scope["method"] == "GET" else None
        if answer is None:
            await self.app(scope, receive, send)
            return
        await answer(scope, receive, send)

    async def _answer(self, scope: Scope, receive: Receive) -> Response | None:
        asked = read_asked(route_path(scope), scope["query_string"])
        principal: Principal | None = scope.get("state", {}).get("principal")
        if asked is None or principal is None or tokens.refusal(principal, Permission.READ_OWN_RUNS) is not None:
            return None
        try:
            return await run_answer(Request(scope, receive), *asked, principal)
        except StorageError as exc:
            # The app's own answer to it (entries/api.py), not the route's: a wait is not made twice.
            log.error("GET %s: %s", scope["path"], exc)
            return storage_refusal(exc)


async def run_answer(request: Request, run_id: str, wait_s: float, principal: Principal) -> Response:
    """`GET /v1/runs/{id}`'s answer, the route's and `RunReads`'s: the run as shown (I18: with what a waiting
    run waits for, oldest first), once a wait of `wait_s` ended if one was asked; 404 when the principal may
    not see it or it is not there; 204 when the client left while it waited. A database error is raised."""
    scope = tokens.run_scope(principal)
    refused = False
    if wait_s:
        waited = await run_wait.waited_run(request, run_id, wait_s, scope)
        if waited is None:
            return Response(status_code=204)  # the client left: no one reads this
        shown, refused = waited
    else:
        views: RunViews = request.app.state.process.views  # the app's, as its routes read it
        shown = await views.shown_run(run_id, scope)
    if shown is None:
        return field_error(404, "path.run_id", f"no run {run_id}")
    return json_answer(shown, headers={"Retry-After": "1"} if refused else None)
