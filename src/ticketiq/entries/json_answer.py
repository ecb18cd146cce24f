"""A JSON answer written once, by orjson, from what a route already holds.

FastAPI encodes a route's returned dict twice over: `jsonable_encoder` walks it into plain values, then
the standard library's json writes them; for a run's view that was a fifth of a `GET /v1/runs/{id}`'s
CPU. orjson writes the same text (datetimes as `isoformat()` gives them, UUIDs as strings) in one pass.
What orjson refuses (an integer beyond 64 bits in a run's answer) goes the old way, so no answer fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from fastapi.encoders import jsonable_encoder
from starlette.responses import JSONResponse, Response

from ticketiq.errors import StorageError


def json_bytes(body: Any) -> bytes:
    try:
        return orjson.dumps(body)
    except TypeError:
        return orjson.dumps(jsonable_encoder(body), default=str)


def json_answer(body: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(json_bytes(body), status_code=status_code, headers=headers, media_type="application/json")


def field_error(status: int, field: str, message: str) -> JSONResponse:
    """A refusal naming the field at fault (`path.run_id`, `body.agent`, ...), as every 4xx of the API is."""
    return JSONResponse({"detail": [{"loc": field.split("."), "msg": message}]}, status_code=status)


def storage_refusal(exc: StorageError) -> JSONResponse:
    """A request the database failed: 503 to retry while it is unavailable, 500 when it refused for good."""
    if exc.retryable:
        return JSONResponse({"detail": "the database is unavailable; retry"}, status_code=503,
                            headers={"Retry-After": "1"})  # fmt: skip
    # Refused for good: retrying the same request cannot help.
    return JSONResponse({"detail": "the database refused this request; it was not applied"}, status_code=500)
