"""Refusals made before the a2a-sdk sees a request, as the A2A endpoint speaks them: the JSON-RPC code
that fits what was refused, and the field named as the sdk names fields."""

from __future__ import annotations

import json
from typing import Any

import pytest
from a2a.utils.errors import InternalError, InvalidParamsError, InvalidRequestError, JSONParseError
from starlette.responses import JSONResponse

from ticketiq.entries.a2a_refusals import TOO_DEEP, error_for, in_kind, refused_params, request_id, unknown_status


@pytest.mark.parametrize(
    ("status", "loc", "kind", "error", "field"),
    [
        (
            422,
            ["body", "params", "message", "parts", 0, "text"],
            None,
            InvalidParamsError,
            "params.message.parts.0.text",
        ),
        (422, ["body", "method"], None, InvalidRequestError, "method"),
        (422, ["body"], TOO_DEEP, JSONParseError, "body"),
        (413, ["body"], "too_large", InvalidRequestError, "body"),
        (422, ["query", "x"], None, InvalidRequestError, "query.x"),
        (422, ["path"], None, InvalidRequestError, "path"),
        (401, ["header", "Authorization"], None, InvalidRequestError, "header.Authorization"),
    ],
)
def test_each_refusal_gets_the_code_that_fits(status: int, loc: list[Any], kind: str | None, error: type,
                                              field: str) -> None:  # fmt: skip
    found = error_for(status, loc, kind, "holds text that cannot be stored")
    assert type(found) is error and found.data == {"field": field}
    assert found.message == f"{field}: holds text that cannot be stored"


def test_a_failure_names_no_field() -> None:
    assert type(error_for(503, None, None, "the database is unavailable; retry")) is InternalError


def test_only_an_id_json_rpc_allows_is_echoed() -> None:
    assert [request_id({"id": v}) for v in ("a", 7, True, 1.5, None, [1])] == ["a", 7, None, None, None, None]
    assert request_id([{"id": 1}]) is None


def test_elsewhere_the_refusal_is_the_house_shape_and_on_a2a_json_rpc_keeping_the_challenge() -> None:
    refusal = JSONResponse({"detail": [{"loc": ["header", "Authorization"], "msg": "no bearer token"}]},
                           status_code=401, headers={"WWW-Authenticate": 'Bearer realm="ticketiq"'})  # fmt: skip
    assert in_kind({"path": "/v1/runs"}, refusal) is refusal
    for scope in ({"path": "/a2a"}, {"path": "/api/a2a", "root_path": "/api"}):
        answer = in_kind(scope, refusal)
        body = json.loads(bytes(answer.body))
        assert (answer.status_code, answer.headers["WWW-Authenticate"]) == (401, 'Bearer realm="ticketiq"')
        assert (body["jsonrpc"], body["id"], body["error"]["code"]) == ("2.0", None, -32600)
        assert body["error"]["data"][0]["metadata"] == {"field": "header.Authorization"}
    unstorable = JSONResponse({"detail": [{"loc": ["body", "params", "x"], "msg": "m", "type": "unstorable_text"}]},
                              status_code=422)  # fmt: skip
    answer = in_kind({"path": "/a2a"}, unstorable, "r-1")
    body = json.loads(bytes(answer.body))
    assert (answer.status_code, body["id"], body["error"]["code"]) == (200, "r-1", -32602)


@pytest.mark.parametrize(
    "params",
    [{}, {"status": None}, {"status": "TASK_STATE_WORKING"}, {"status": 3}, {"status": "TASK_STATE_UNSPECIFIED"}],
)
def test_a_list_naming_a_task_state_or_none_is_left_to_the_sdk(params: dict[str, Any]) -> None:
    assert unknown_status({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": params}) is None


@pytest.mark.parametrize("status", ["INVALID_STATUS", "working", "", 99, -1, True, 2.5, ["TASK_STATE_WORKING"], {}])
def test_a_list_naming_a_status_that_is_no_task_state_is_invalid_params(status: Any) -> None:
    found = unknown_status({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"status": status}})
    assert isinstance(found, InvalidParamsError) and found.data == {"field": "params.status"}
    assert found.message.startswith(f"params.status: {json.dumps(status)} is no task state")


def test_only_list_tasks_is_judged_and_the_value_said_back_is_bounded() -> None:
    for other in ({"method": "GetTask", "params": {"status": "X"}}, {"method": "ListTasks", "params": "x"}, [1], None):
        assert unknown_status(other) is None
    found = unknown_status({"method": "ListTasks", "params": {"status": "x" * 10_000}})
    assert found is not None and len(found.message) < 400
    answer = refused_params({"jsonrpc": "2.0", "id": 9, "method": "ListTasks", "params": {"status": "X"}})
    assert answer is not None and answer.status_code == 200
    body = json.loads(bytes(answer.body))
    assert (body["id"], body["error"]["code"], body["error"]["data"][0]["metadata"]) == (
        9,
        -32602,
        {"field": "params.status"},
    )
