"""Refusals on the A2A endpoint in the protocol it speaks: what is refused before the a2a-sdk sees a request.

The middlewares refuse a request before any route does: no valid bearer token (`auth.BearerAuth`), a
body too large, JSON nested too deep, text Postgres cannot store (`text_guard.StorableText`). Elsewhere
they answer in the house shape (`{"detail": [{"loc": [...], "msg": ...}]}`); on `/a2a` the same refusal
is a JSON-RPC 2.0 error object, made by the sdk's own `build_error_response` so it reads like every
other error of the endpoint: the request's id when it was read (else null), the code that fits, the
message naming the field, and `data` naming it too (the sdk's ErrorInfo detail, whose metadata is
`{"field": ...}`: the sdk's client hands it back as the error's `data`).

JSON-RPC answers an error with HTTP 200, as the sdk does, so a client reads it as the protocol's error;
only the authentication refusals keep their HTTP status and challenge (A2A authenticates over HTTP, as
the agent card says), and so does a database outage's 503 (`Retry-After`).

One refusal is of params the sdk would take: a `ListTasks` `status` that names no task state
(`unknown_status`). The sdk parses params with unknown fields ignored, which also turns an unknown enum
value into 0 (TASK_STATE_UNSPECIFIED: no filter), so the request as sent is read before it.
"""

from __future__ import annotations

import json
from typing import Any

from a2a.server import jsonrpc_models
from a2a.server.request_handlers.response_helpers import build_error_response
from a2a.types.a2a_pb2 import TaskState
from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, InvalidRequestError, JSONParseError
from starlette.responses import JSONResponse, Response
from starlette.types import Scope

from ticketiq.entries.a2a_card import RPC_PATH

# The `type` text_guard gives a body nested too deep: a JSON-RPC parse error (the server would not parse it).
TOO_DEEP = "json_too_deep"
# Statuses kept as they are: HTTP says what they mean (authenticate; retry later; refused for good).
KEPT = frozenset({401, 403, 500, 503})
# A task state by its name, as ListTasks may name it (by name or number).
TASK_STATES: dict[str, int] = dict(TaskState.items())


def speaks_jsonrpc(scope: Scope) -> bool:
    """Whether the request is for the A2A JSON-RPC endpoint (behind a proxy's root path too)."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return (path[len(root) :] if root and path.startswith(root) else path) == RPC_PATH


def request_id(body: Any) -> str | int | None:
    """The JSON-RPC id of a parsed request body, when it has one JSON-RPC allows (a string or a number)."""
    found = body.get("id") if isinstance(body, dict) else None
    return found if isinstance(found, str | int) and not isinstance(found, bool) else None


def error_for(status: int, loc: list[Any] | None, kind: str | None, message: str) -> A2AError:
    """The protocol's error for a house refusal: its code from what was refused and where, the field named
    as the sdk names fields (dotted, from the request object: `params.message.parts.0.text`)."""
    if loc is None:  # no field: the database failed, not the request
        return InternalError(message=message)
    field = ".".join(str(part) for part in (loc[1:] if loc[0] == "body" and len(loc) > 1 else loc))
    said = f"{field}: {message}"
    if kind == TOO_DEEP:
        return JSONParseError(message=said, data={"field": field})
    if loc[0] == "body" and len(loc) > 1 and loc[1] == "params":
        return InvalidParamsError(message=said, data={"field": field})
    return InvalidRequestError(message=said, data={"field": field})


def unknown_status(body: Any) -> InvalidParamsError | None:
    """The refusal of a `ListTasks` whose `status` names no task state, by name or number, as sent; None
    for any other request (the sdk judges those). Without it the sdk's parse makes the unknown value 0,
    no filter at all, and the caller gets every task instead of -32602."""
    if not isinstance(body, dict) or body.get("method") != "ListTasks" or not isinstance(body.get("params"), dict):
        return None
    status = body["params"].get("status")
    if status is None or (isinstance(status, str) and status in TASK_STATES):
        return None
    if isinstance(status, int) and not isinstance(status, bool) and status in TASK_STATES.values():
        return None
    said = json.dumps(status)
    said = said if len(said) <= 60 else said[:57] + "..."  # the caller's own value, bounded
    states = ", ".join(name for name in TASK_STATES if name != "TASK_STATE_UNSPECIFIED")
    return InvalidParamsError(
        message=f"params.status: {said} is no task state; send one of {states}, or none for every state",
        data={"field": "params.status"},
    )


def refused_params(body: Any) -> Response | None:
    """The JSON-RPC error answering a parsed request body whose params the sdk would take but must not
    (`unknown_status`); None when the sdk should judge it."""
    error = unknown_status(body)
    return None if error is None else JSONResponse(_error_body(request_id(body), error))


def in_kind(scope: Scope, refusal: JSONResponse, request_id: str | int | None = None) -> Response:
    """`refusal` (the house shape) as the request's endpoint speaks it: unchanged but on `/a2a`."""
    if not speaks_jsonrpc(scope):
        return refusal
    detail = json.loads(bytes(refusal.body))["detail"]
    if isinstance(detail, list):
        first = detail[0]
        error = error_for(refusal.status_code, list(first["loc"]), first.get("type"), str(first["msg"]))
    else:
        error = error_for(refusal.status_code, None, None, str(detail))
    status = refusal.status_code if refusal.status_code in KEPT else 200
    headers = {k: v for k, v in refusal.headers.items() if k.lower() in ("www-authenticate", "retry-after")}
    return JSONResponse(_error_body(request_id, error), status_code=status, headers=headers)


def _error_body(request_id: str | int | None, error: A2AError) -> dict[str, Any]:
    if isinstance(error, JSONParseError):
        # The sdk's map from its errors to JSON-RPC objects lacks this one (a2a-sdk 1.3): its JSON-RPC
        # model, with the details it gives every other error.
        model = jsonrpc_models.JSONParseError(message=error.message, data=build_error_details(error))
        return build_error_response(request_id, model)
    return build_error_response(request_id, error)
