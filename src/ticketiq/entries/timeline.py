"""A run's timeline and its events, over HTTP (issue 16). The same rights as `GET /v1/runs/{id}`: a caller
reads its own runs, operator and admin every run (`tokens.run_scope`); another's run is a 404.

- `GET /v1/runs/{id}/timeline`: {run, attempts, steps} (`views/timeline.py`).
- `GET /v1/runs/{id}/events`: Server-Sent Events, `status`, `attempt` and `step` as they change, and a
  last `end` once the run ended, after which the stream closes (`views/timeline_feed.py`).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.entries.auth import requires
from ticketiq.views.runs import RunViews

Reader = Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))]
# A comment line this often keeps a quiet stream open through proxies that close idle connections.
PING_S = 15.0


def _no_run(run_id: uuid.UUID) -> JSONResponse:
    return JSONResponse({"detail": [{"loc": ["path", "run_id"], "msg": f"no run {run_id}"}]}, status_code=404)


def add_routes(router: APIRouter, views: Callable[[Request], RunViews]) -> None:
    @router.get("/v1/runs/{run_id}/timeline", response_model=None)
    async def timeline(run_id: uuid.UUID, request: Request, reader: Reader) -> dict[str, Any] | JSONResponse:
        found = await views(request).timeline(str(run_id), tokens.run_scope(reader))
        return _no_run(run_id) if found is None else found

    @router.get("/v1/runs/{run_id}/events", response_model=None)
    async def events(run_id: uuid.UUID, request: Request, reader: Reader) -> EventSourceResponse | JSONResponse:
        scope = tokens.run_scope(reader)
        if await views(request).engine.get_run(str(run_id), scope) is None:
            return _no_run(run_id)
        feed = views(request).timeline_events(str(run_id), scope)

        async def stream() -> AsyncIterator[ServerSentEvent]:
            async for event, data in feed:
                yield ServerSentEvent(json.dumps(jsonable_encoder(data)), event=event)

        return EventSourceResponse(stream(), ping=PING_S)
