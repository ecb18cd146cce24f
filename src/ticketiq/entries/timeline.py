"""A run's timeline and its events, over HTTP (issue 16). The same rights as `GET /v1/runs/{id}`: a caller
reads its own runs, operator and admin every run (`tokens.run_scope`); another's run is a 404.

- `GET /v1/runs/{id}/timeline`: {run, attempts, steps} (`views/timeline.py`).
- `GET /v1/runs/{id}/events`: Server-Sent Events, `status`, `attempt` and `step` as they change, and a
  last `end` once the run ended, after which the stream closes (`views/timeline_feed.py`). Bounded (issue
  32): a principal holds at most TICKETIQ_MAX_STREAMS_PER_PRINCIPAL open on a process, the process at most
  TICKETIQ_MAX_STREAMS (then 429 with Retry-After, `views/follows.py`); a stream lasts at most
  TICKETIQ_STREAM_MAX_S and ends when its token is revoked or its console session ends. Each batch of
  events carries the id a client sends back as `Last-Event-ID` to follow on from there, nothing lost or
  told twice (`views/timeline_cursor.py`); a follower told the end already gets 204 (an EventSource
  reconnects no more).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, Response
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import TERMINAL
from ticketiq.entries import answers, auth
from ticketiq.entries.auth import requires
from ticketiq.views import timeline_cursor
from ticketiq.views.follows import CredentialEnded, Follow, Follows, TooMany
from ticketiq.views.runs import RunViews
from ticketiq.views.timeline_cursor import Cursor
from ticketiq.views.timeline_feed import Following

log = logging.getLogger(__name__)

Reader = Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))]
# A comment line this often keeps a quiet stream open through proxies that close idle connections.
PING_S = 15.0
# What an EventSource waits before it reconnects to a stream that ended before its run (its time was up,
# its credential ended): the `retry` of its last lines.
RECONNECT_MS = 1000
# A client that takes no event for this long (its socket full) is let go: its follow is freed.
SEND_TIMEOUT_S = 30.0
STREAM = "stream"
# A stream's first read of its run (shared with the run's other streams) given up after this long: 503.
FIRST_READ_S = 10.0


def _no_run(run_id: uuid.UUID) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": ["path", "run_id"], "msg": f"no run {run_id}"}]}, status_code=404)


def _too_many(refused: TooMany, principal: str) -> JSONResponse:
    where = ["header", "Authorization"] if refused.principal == principal else []
    return JSONResponse({"detail": [{"loc": where, "msg": str(refused)}]}, status_code=429,
                        headers={"Retry-After": str(refused.retry_after_s)})  # fmt: skip


class FollowedStream(EventSourceResponse):
    """The events stream, holding its follow until the response is done, however it ends (the run ended,
    the follow's time was up or its credential ended, the client left, the server stopped)."""

    def __init__(
        self, content: AsyncIterator[ServerSentEvent], follow: Follow, follows: Follows, following: Following
    ) -> None:
        super().__init__(content, ping=PING_S, send_timeout=SEND_TIMEOUT_S)
        self.follow = follow
        self.follows = follows
        self.following = following

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except TimeoutError:  # sse-starlette's send timeout: the client read nothing for SEND_TIMEOUT_S
            log.info("%s %s: the client took no event for %g s; its stream was let go", scope["method"],
                     scope["path"], SEND_TIMEOUT_S)  # fmt: skip
        finally:
            self.following.close()  # also when the stream never started (a HEAD, a client gone at once)
            self.follows.close(self.follow)


def farewell(follow: Follow, ended: bool, max_s: float) -> str | None:
    """The comment a stream closes with, saying why (None: the run ended, its `end` says so)."""
    if ended:
        return None
    if follow.why is not None:
        return f"the stream ended: {follow.why}"
    return f"a stream lasts at most {max_s:g} s: reconnect with Last-Event-ID to follow on from here"


def add_routes(router: APIRouter, views: Callable[[Request], RunViews], follows: Callable[[Request], Follows]) -> None:
    @router.get("/v1/runs/{run_id}/timeline", response_model=None,
                responses=answers.documented(200, answers.Timeline))  # fmt: skip
    async def timeline(run_id: uuid.UUID, request: Request, reader: Reader) -> dict[str, Any] | JSONResponse:
        found = await views(request).timeline(str(run_id), tokens.run_scope(reader))
        return _no_run(run_id) if found is None else found

    @router.get("/v1/runs/{run_id}/events", response_model=None)
    async def events(
        run_id: uuid.UUID,
        request: Request,
        reader: Reader,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        try:
            cursor = None if last_event_id is None else timeline_cursor.decode(last_event_id)
        except ValueError as exc:
            return JSONResponse({"detail": [{"loc": ["header", "Last-Event-ID"], "msg": f"Last-Event-ID: {exc}"}]},
                                status_code=422)  # fmt: skip
        held, max_s = follows(request), views(request).engine.deps.settings.stream_max_s
        # Taken before anything is read: a refusal costs no statement.
        try:
            follow = held.open(auth.credential(request), STREAM, max_s)
        except TooMany as refused:
            return _too_many(refused, reader.name)
        except CredentialEnded as ended:
            return auth.refused_ended(str(ended))
        # The run as the feed reads it for all its streams: a stream opened on a run followed already
        # costs no statement.
        following = views(request).feed.following(str(run_id))
        try:
            shown = await following.first(FIRST_READ_S)
        except BaseException:
            following.close()
            held.close(follow)
            raise
        run = None if shown is None else shown["run"]
        if run is None or not tokens.may_read(run["created_by"], tokens.run_scope(reader)):
            following.close()
            held.close(follow)
            return _no_run(run_id)
        if cursor is not None and cursor.ended and run["status"] in TERMINAL:
            following.close()
            held.close(follow)
            return Response(status_code=204)
        stream = _stream(views(request), following, cursor, follow, max_s)
        return FollowedStream(stream, follow, held, following)


async def _stream(
    views: RunViews, following: Following, cursor: Cursor | None, follow: Follow, max_s: float
) -> AsyncIterator[ServerSentEvent]:
    ended = False
    async for told, after in views.feed.follow(following, cursor, follow):
        last = len(told) - 1
        for i, (event, data) in enumerate(told):
            yield ServerSentEvent(json.dumps(jsonable_encoder(data)), event=event,
                                  id=after.encode() if i == last else None)  # fmt: skip
        ended = after.ended
    said = farewell(follow, ended, max_s)
    if said is not None:
        yield ServerSentEvent(comment=said, retry=RECONNECT_MS)
