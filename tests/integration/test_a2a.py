"""The A2A entry point over a real socket: the a2a-sdk's own client for protocol 1.0, plain JSON-RPC
over httpx for the v0.3 method names. A task is its run: its id is the run's, its state the run's."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    JSONParseError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields

from tests.support.a2a_rig import (
    A2A,
    ACTOR,
    AGENTS,
    a2a,
    count,
    message,
    send,
    states,
    text_of,
    v03_message,
)
from tests.support.engine import read_rows
from tests.support.http import TLS

# ----- the card ----------------------------------------------------------------------------------------


async def test_the_card_is_open_and_lists_every_agent_the_endpoint_and_the_bearer_scheme(
    db_url: str, tmp_path: Path
) -> None:
    async with a2a(db_url, tmp_path) as s, httpx.AsyncClient(verify=TLS) as http:
        card = await A2ACardResolver(http, s.base).get_agent_card()  # no token
        raw = (await http.get(f"{s.base}/.well-known/agent-card.json")).json()
    validate_proto_required_fields(card)  # every field the protocol requires is there
    # In the agents file's order (the harness writes it with sorted keys).
    assert [(k.id, k.description) for k in card.skills] == [(n, a["description"]) for n, a in sorted(AGENTS.items())]
    assert {(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces} == {
        (f"{s.base}/a2a", "JSONRPC", "1.0"),
        (f"{s.base}/a2a", "JSONRPC", "0.3"),
    }
    assert card.capabilities.streaming
    assert card.security_schemes["bearer"].http_auth_security_scheme.scheme.lower() == "bearer"
    assert list(card.security_requirements[0].schemes) == ["bearer"]
    assert "answerer" in card.description  # the default agent: the file's first
    # What a v0.3 client reads of the same card.
    assert (raw["url"], raw["protocolVersion"]) == (f"{s.base}/a2a", "0.3")


async def test_the_card_names_the_public_url_and_the_default_agent_when_set(db_url: str, tmp_path: Path) -> None:
    async with (
        a2a(db_url, tmp_path, a2a_public_url="https://tiq.example.com/", a2a_default_agent="writer") as s,
        httpx.AsyncClient(verify=TLS) as http,
    ):
        card = await A2ACardResolver(http, s.base).get_agent_card()
    assert {i.url for i in card.supported_interfaces} == {"https://tiq.example.com/a2a"}
    assert "is for writer" in card.description
    assert {k.id: list(k.tags) for k in card.skills}["writer"] == ["ticketiq", "default"]


# ----- messages and tasks ----------------------------------------------------------------------------------


async def test_a_message_runs_its_agent_and_the_task_completes_with_the_answer(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        task = await send(client, message("check OPS-1", "m-1"))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in task.artifacts for p in a.parts] == ["answered OPS-1"]
        got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in got.artifacts for p in a.parts] == ["answered OPS-1"]
    assert [m.message_id for m in got.history] == ["m-1"]
    assert got.context_id == task.context_id
    runs = await read_rows(db_url, "SELECT id::text, agent, channel, created_by, status FROM runs")
    assert runs == [{"id": task.id, "agent": "answerer", "channel": "a2a", "created_by": ACTOR, "status": "succeeded"}]


async def test_the_same_message_id_twice_is_one_task(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        first = await send(client, message("check OPS-2", "m-2"))
        again = await send(client, message("check OPS-2", "m-2"))
        assert again.id == first.id and again.status.state == TaskState.TASK_STATE_COMPLETED
        with pytest.raises(InvalidParamsError, match=r"params\.message\.messageId"):
            await send(client, message("check OPS-3", "m-2"))  # the same id with other content
    assert await count(db_url, "runs") == 1
    assert await count(db_url, "a2a_tasks") == 1


async def test_a_stream_shows_the_task_working_then_completed(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path, latency_ms=300) as s, s.client(streaming=True) as client:
        events = [e async for e in client.send_message(message("check OPS-4", "m-4"))]
    seen = states(events)
    assert seen[0] in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
    assert TaskState.TASK_STATE_WORKING in seen and seen[-1] == TaskState.TASK_STATE_COMPLETED
    assert seen.index(TaskState.TASK_STATE_WORKING) < seen.index(TaskState.TASK_STATE_COMPLETED)
    answers = [p.text for e in events if e.HasField("artifact_update") for p in e.artifact_update.artifact.parts]
    assert answers == ["answered OPS-4"]


async def test_subscribe_follows_a_task_started_without_waiting(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path, latency_ms=300) as s:
        async with s.client(polling=True) as client:
            started = await send(client, message("check OPS-5", "m-5"))
        assert started.status.state in (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)
        async with s.client(streaming=True) as client:
            events = [e async for e in client.subscribe(SubscribeToTaskRequest(id=started.id))]
    assert events[0].task.id == started.id
    assert states(events)[-1] == TaskState.TASK_STATE_COMPLETED


async def test_list_shows_the_callers_own_tasks_newest_first_in_pages(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s:
        caller = await s.h.token("cal", "caller")
        async with s.client() as ops:
            mine = [(await send(ops, message(f"check OPS-{n}", f"o-{n}"))).id for n in range(3)]
        async with s.client(caller) as cal:
            theirs = (await send(cal, message("check OPS-9", "c-1"))).id
            own = await cal.list_tasks(ListTasksRequest())
            with pytest.raises(TaskNotFoundError):
                await cal.get_task(GetTaskRequest(id=mine[0]))
        async with s.client() as ops:
            first = await ops.list_tasks(ListTasksRequest(page_size=2))
            rest = await ops.list_tasks(ListTasksRequest(page_size=2, page_token=first.next_page_token))
            done = await ops.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, page_size=10))
            with pytest.raises(InvalidParamsError, match="pageToken"):
                await ops.list_tasks(ListTasksRequest(page_token="not-a-token"))
    assert [t.id for t in own.tasks] == [theirs] and own.total_size == 1
    # An operator (here an admin) reads every task.
    assert [t.id for t in first.tasks] + [t.id for t in rest.tasks] == [theirs, *reversed(mine)]
    assert first.total_size == 4 and rest.next_page_token == ""
    assert len(done.tasks) == 4


async def test_a_failed_run_is_a_failed_task_with_the_reason(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        async with httpx.AsyncClient(
            verify=TLS, base_url=s.base, headers={"Authorization": f"Bearer {s.token}"}
        ) as http:
            gate = await http.put("/v1/gates/quarantines/agent/answerer", json={"reason": "under review"})
            assert gate.status_code == 200
        task = await send(client, message("check OPS-6", "m-6"))
    assert task.status.state == TaskState.TASK_STATE_FAILED
    assert "agent answerer is quarantined: under review" in text_of(task)
    assert not task.artifacts


# ----- waiting for the client: input, approval, cancel ------------------------------------------------------


async def test_a_task_waiting_for_input_goes_on_with_the_message_that_answers_it(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        asked = await send(client, message("ship OPS-7", "m-7", agent="asker"))
        assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert text_of(asked) == "Which environment?"
        answered = await send(client, message("staging", "m-8", agent=None, task_id=asked.id))
        assert answered.id == asked.id and answered.status.state == TaskState.TASK_STATE_COMPLETED
        assert [p.text for a in answered.artifacts for p in a.parts] == ["deploying to staging"]
        with pytest.raises(UnsupportedOperationError, match="has ended"):
            await send(client, message("production", "m-9", agent=None, task_id=asked.id))
        got = await client.get_task(GetTaskRequest(id=asked.id))
    assert {"m-7", "m-8"} <= {m.message_id for m in got.history}
    assert await count(db_url, "runs") == 1
    given = await read_rows(db_url, "SELECT text, given_by FROM inputs")
    assert given == [{"text": "staging", "given_by": ACTOR}]


async def test_without_a_valid_token_the_endpoint_answers_401_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": v03_message("hi", "x")}
    async with a2a(db_url, tmp_path) as s, httpx.AsyncClient(verify=TLS, base_url=s.base) as http:
        for headers in ({}, {"Authorization": "Bearer tiq_" + "x" * 43}, {"Authorization": "Basic abc"}):
            response = await http.post("/a2a", json=body, headers=headers)
            assert response.status_code == 401, headers
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert await count(db_url, "runs") == 0
    assert await count(db_url, "a2a_tasks") == 0


async def test_malformed_json_rpc_gets_the_protocol_errors_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s:
        headers = {"Authorization": f"Bearer {s.token}", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(verify=TLS, base_url=s.base, headers=headers) as http:
            codes = []
            for body in (
                b"{not json",
                b'{"id": 1, "method": "SendMessage", "params": {}}',  # no jsonrpc
                b'{"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": "hi"}}',
                b'{"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"role": "ROLE_USER"}}}',
            ):
                response = await http.post("/a2a", content=body, headers={"Content-Type": "application/json"})
                assert response.status_code == 200
                codes.append(response.json()["error"]["code"])
    assert codes == [-32700, -32600, -32601, -32602, -32602]
    assert await count(db_url, "runs") == 0
    assert await count(db_url, "a2a_tasks") == 0


def rpc_error(response: httpx.Response) -> tuple[int, Any, int, str | None]:
    """A JSON-RPC error answer as (HTTP status, id, code, the field its data names)."""
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "result" not in body, body
    details = body["error"].get("data") or [{}]
    return response.status_code, body["id"], body["error"]["code"], details[0].get("metadata", {}).get("field")


def nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


async def test_every_refusal_before_the_sdk_is_a_json_rpc_error_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    # Refusals made before the sdk sees a request (unstorable text: I16; JSON nested too deep; a body too
    # large; no token) answer in the protocol the endpoint speaks, with the request's id when it was read.
    def sent(message_id: str, text: str = "check OPS-40", **extra: Any) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "id": message_id, "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "messageId": message_id, "parts": [{"text": text}], **extra}}}  # fmt: skip

    async with a2a(db_url, tmp_path) as s:
        headers = {"Authorization": f"Bearer {s.token}", "A2A-Version": "1.0"}
        async with httpx.AsyncClient(verify=TLS, base_url=s.base, headers=headers) as http:

            async def post(body: dict[str, Any] | bytes) -> httpx.Response:
                raw = body if isinstance(body, bytes) else json.dumps(body).encode()  # ASCII: lone surrogates too
                return await http.post("/a2a", content=raw, headers={"Content-Type": "application/json"})

            unstorable = await post(sent("r-1", "a\u0000b"))
            in_method = await post({**sent("r-2"), "method": "Send\ud800Message"})
            too_deep = await post(sent("r-3", metadata=nested(70)))
            recursive = await post(b'{"jsonrpc": "2.0", "id": 4, "params": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
            too_large = await post(sent("r-5", "x" * (2 << 20)))
        async with httpx.AsyncClient(verify=TLS, base_url=s.base) as http:
            anonymous = await http.post("/a2a", json=sent("r-6"))
        async with s.client() as client:
            with pytest.raises(InvalidParamsError) as bad_text:
                await send(client, message("a\u0000b", "r-7"))
            deep_message = message("check OPS-41", "r-8")
            deep_message.message.metadata.update({"deep": nested(70)})
            with pytest.raises(JSONParseError, match="nested deeper than 64"):
                await send(client, deep_message)
    assert rpc_error(unstorable) == (200, "r-1", -32602, "params.message.parts.0.text")
    assert "cannot be stored" in unstorable.json()["error"]["message"]
    assert rpc_error(in_method) == (200, "r-2", -32600, "method")
    assert rpc_error(too_deep) == (200, None, -32700, "body")  # not parsed: its id is not known
    assert "nested deeper than 64 levels" in too_deep.json()["error"]["message"]
    assert rpc_error(recursive) == (200, None, -32700, "body")
    assert rpc_error(too_large) == (200, None, -32600, "body")
    assert rpc_error(anonymous) == (401, None, -32600, "header.Authorization")
    assert anonymous.headers["WWW-Authenticate"] == 'Bearer realm="ticketiq"'
    assert bad_text.value.data == {"field": "params.message.parts.0.text"}
    assert await count(db_url, "runs") == 0
    assert await count(db_url, "a2a_tasks") == 0


async def test_an_unknown_or_forbidden_agent_is_invalid_params_and_stores_nothing(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s:
        limited = await s.h.token("only-asker", "caller", agents=["asker"])
        async with s.client() as client:
            with pytest.raises(InvalidParamsError, match=r"params\.message\.metadata\.agent: no agent named 'nobody'"):
                await send(client, message("check OPS-13", "m-13", agent="nobody"))
            with pytest.raises(InvalidParamsError, match=r"params\.message\.parts"):
                await send(client, SendMessageRequest(message=Message(role=Role.ROLE_USER, message_id="m-14",
                                                                      parts=[Part(text="  ")])))  # fmt: skip
            with pytest.raises(TaskNotFoundError):
                await send(client, message("hello", "m-15", task_id="00000000-0000-0000-0000-000000000000"))
        async with s.client(limited) as client:
            with pytest.raises(InvalidParamsError, match="may not start agent answerer"):
                await send(client, message("check OPS-16", "m-16", agent=None))  # the default agent
    assert await count(db_url, "runs") == 0
    assert await count(db_url, "a2a_tasks") == 0


# ----- the v0.3 method names --------------------------------------------------------------------------------


async def sse(s: A2A, method: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """A v0.3 streaming call: each event's JSON-RPC result."""
    found = []
    async with (
        httpx.AsyncClient(verify=TLS, base_url=s.base, timeout=30) as http,
        http.stream(
            "POST",
            "/a2a",
            json={"jsonrpc": "2.0", "id": 8, "method": method, "params": params},
            headers={"Authorization": f"Bearer {s.token}"},
        ) as response,  # fmt: skip
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                found.append(json.loads(line.removeprefix("data:"))["result"])
    return found


async def test_the_v03_method_names_are_served_on_the_same_endpoint(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path, approval=["probe_write"], latency_ms=200) as s:
        sent = await s.rpc("message/send", v03_message("check OPS-20", "v-1"))
        task = sent["result"]
        assert (task["kind"], task["status"]["state"]) == ("task", "completed")
        assert task["artifacts"][0]["parts"][0]["text"] == "answered OPS-20"
        got = await s.rpc("tasks/get", {"id": task["id"]})
        assert got["result"]["status"]["state"] == "completed"

        streamed = await sse(s, "message/stream", v03_message("check OPS-21", "v-2"))
        assert streamed[-1]["status"]["state"] == "completed" and streamed[-1]["final"] is True
        assert any(e["kind"] == "artifact-update" for e in streamed)

        held = (await s.rpc("message/send", v03_message("write OPS-22", "v-3", metadata={"agent": "writer"})))["result"]
        assert held["status"]["state"] == "input-required"
        resubscribed = await sse(s, "tasks/resubscribe", {"id": held["id"]})
        assert [e["status"]["state"] for e in resubscribed] == ["input-required"]
        canceled = await s.rpc("tasks/cancel", {"id": held["id"]})
        assert canceled["result"]["status"]["state"] == "canceled"

        unknown = await s.rpc("message/send", v03_message("check", "v-4", metadata={"agent": "nobody"}))
        assert unknown["error"]["code"] == -32602
        missing = await s.rpc("tasks/get", {"id": "not-a-task"})
        assert missing["error"]["code"] == -32001
    assert await count(db_url, "runs") == 3


async def test_a_resend_while_the_first_send_still_runs_joins_its_task(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path, latency_ms=300) as s, s.client() as client:
        first, again = await asyncio.gather(
            send(client, message("check OPS-30", "m-30")), send(client, message("check OPS-30", "m-30"))
        )
    assert first.id == again.id
    assert first.status.state == again.status.state == TaskState.TASK_STATE_COMPLETED
    assert await count(db_url, "runs") == 1
