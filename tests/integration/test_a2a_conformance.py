"""What the A2A project's conformance suite (a2a-tck) found, over a real socket: the card a 1.0 client asks
for validates against the protocol's 1.0 JSON Schema, ListTasks refuses a status that names no task state,
`pageSize` answers the size asked for, a message of a media type not taken is -32005, and the sample's
`tck` agent keeps its task open for the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from a2a.client import A2ACardResolver
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    TaskState,
)
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError

import ticketiq
from tests.support.a2a_rig import AGENTS, SCRIPTS, a2a, count, message, send, text_of
from tests.support.a2a_schema import errors
from tests.support.http import TLS

CARD = "/.well-known/agent-card.json"
SAMPLE = Path(ticketiq.__file__).parent / "agents" / "sample.yaml"
SHIPPED_SCRIPT = Path(ticketiq.__file__).parent / "standins" / "scripts" / "tck.yaml"


async def list_tasks(base: str, token: str, params: dict[str, Any]) -> dict[str, Any]:
    """One protocol 1.0 ListTasks as a client sends it, over plain httpx: the params exactly as given."""
    headers = {"Authorization": f"Bearer {token}", "A2A-Version": "1.0"}
    async with httpx.AsyncClient(verify=TLS, base_url=base, headers=headers, timeout=30) as http:
        response = await http.post(
            "/a2a", json={"jsonrpc": "2.0", "id": "l-1", "method": "ListTasks", "params": params}
        )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# ----- the card ----------------------------------------------------------------------------------------


async def test_the_card_a_1_0_client_asks_for_validates_against_the_1_0_schema(db_url: str, tmp_path: Path) -> None:
    async with a2a(db_url, tmp_path) as s, httpx.AsyncClient(verify=TLS, base_url=s.base) as http:
        by_header = await http.get(CARD, headers={"A2A-Version": "1.0"})
        by_query = await http.get(CARD, params={"A2A-Version": "1.0"})
        unversioned = await http.get(CARD)
        read = await A2ACardResolver(http, s.base).get_agent_card()  # the sdk's client sends no version
    card = by_header.json()
    assert errors(card, "Agent Card") == []
    assert by_query.json() == card
    # One object of its kind, as the 1.0 schema has a security scheme; none of the 0.3 fields beside it.
    assert list(card["securitySchemes"]["bearer"]) == ["httpAuthSecurityScheme"]
    assert card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert not {"url", "protocolVersion", "preferredTransport", "security"} & set(card)
    assert by_header.headers["vary"] == "A2A-Version"
    # No version is 0.3 (the spec's rule): a 0.3 client finds its fields, and a 1.0 client that sent
    # none reads the same card as the one that asked.
    old = unversioned.json()
    assert (old["url"], old["protocolVersion"], old["securitySchemes"]["bearer"]["type"]) == (
        f"{s.base}/a2a", "0.3", "http",
    )  # fmt: skip
    assert read.security_schemes["bearer"].http_auth_security_scheme.scheme == "Bearer"
    assert {i.protocol_version for i in read.supported_interfaces} == {"1.0", "0.3"}


# ----- ListTasks -----------------------------------------------------------------------------------------


async def test_list_tasks_with_a_status_naming_no_task_state_is_invalid_params_naming_the_field(
    db_url: str, tmp_path: Path
) -> None:
    async with a2a(db_url, tmp_path) as s:
        async with s.client() as client:
            done = await send(client, message("check OPS-1", "m-1"))
        refusals = [await list_tasks(s.base, s.token, {"status": bad}) for bad in ("INVALID_STATUS", 99, "completed")]
        by_name = await list_tasks(s.base, s.token, {"status": "TASK_STATE_COMPLETED"})
        by_number = await list_tasks(s.base, s.token, {"status": TaskState.TASK_STATE_COMPLETED})
        other = await list_tasks(s.base, s.token, {"status": "TASK_STATE_WORKING"})
    for refused in refusals:
        assert "result" not in refused and refused["id"] == "l-1", refused
        assert refused["error"]["code"] == -32602
        assert refused["error"]["message"].startswith("params.status: ")
        assert refused["error"]["data"][0]["metadata"] == {"field": "params.status"}
    assert "TASK_STATE_COMPLETED" in refusals[0]["error"]["message"]  # it says what a status may be
    assert [t["id"] for t in by_name["result"]["tasks"]] == [done.id]
    assert [t["id"] for t in by_number["result"]["tasks"]] == [done.id]
    assert other["result"]["tasks"] == []


async def test_page_size_answers_the_size_asked_for(db_url: str, tmp_path: Path) -> None:
    # The spec's ListTasksResponse.page_size is "the page size used for this response", and its examples
    # answer the size asked for (pageSize 10 over a page of 1 task of 5): not the number of tasks the page holds.
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        ids = [(await send(client, message(f"check OPS-{n}", f"p-{n}"))).id for n in range(3)]
        two = await client.list_tasks(ListTasksRequest(page_size=2))
        ten = await client.list_tasks(ListTasksRequest(page_size=10))
        unasked = await client.list_tasks(ListTasksRequest())
    assert (two.page_size, len(two.tasks), two.total_size) == (2, 2, 3) and two.next_page_token
    assert (ten.page_size, len(ten.tasks), ten.next_page_token) == (10, 3, "")
    assert (unasked.page_size, [t.id for t in unasked.tasks]) == (50, list(reversed(ids)))  # the protocol's default


# ----- SendMessage -----------------------------------------------------------------------------------------


async def test_a_message_of_a_media_type_not_taken_is_content_type_not_supported(db_url: str, tmp_path: Path) -> None:
    # The card's input mode is text/plain: a message with no text but a file is -32005, naming the part.
    sent = Message(role=Role.ROLE_USER, message_id="f-1", parts=[Part(raw=b"tck", media_type="application/x-tck")])
    async with a2a(db_url, tmp_path) as s, s.client() as client:
        with pytest.raises(
            ContentTypeNotSupportedError, match=r"params\.message\.parts\.0: a raw part \(application/x-tck\)"
        ):
            await send(client, SendMessageRequest(message=sent))
        blank = Message(role=Role.ROLE_USER, message_id="f-2", parts=[Part(text=" ")])
        with pytest.raises(InvalidParamsError, match=r"params\.message\.parts: the message holds no text"):
            await send(client, SendMessageRequest(message=blank))  # text, but none: still -32602
    assert await count(db_url, "runs") == 0


# ----- the sample's tck agent ------------------------------------------------------------------------------


async def test_the_sample_tck_agent_keeps_its_task_open_to_be_continued_listed_or_cancelled(
    db_url: str, tmp_path: Path
) -> None:
    # The agent as the sample file declares it and the stand-in's shipped script, the suite's default agent.
    tck = yaml.safe_load(SAMPLE.read_text())["agents"]["tck"]
    scripts = {**SCRIPTS, "tck": yaml.safe_load(SHIPPED_SCRIPT.read_text())["steps"]}
    agents = {**AGENTS, "tck": {**tck, "owner": "tester", "tenant": "t1"}}
    async with a2a(db_url, tmp_path, scripts, agents, a2a_default_agent="tck") as s, s.client() as client:
        asked = await send(client, message("Triage OPS-7", "t-1", agent=None))
        waiting = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_INPUT_REQUIRED))
        turns = [await send(client, message(said, f"t-a{n}", agent=None, task_id=asked.id))
                 for n, said in enumerate(("a broken deploy", "staging", "the on-call", "no"))]  # fmt: skip
        other = await send(client, message("Triage OPS-8", "t-2", agent=None))
        cancelled = await client.cancel_task(CancelTaskRequest(id=other.id))
    assert asked.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert [t.id for t in waiting.tasks] == [asked.id]
    # Each answer continues the same task, which asks its next question until the last is answered.
    assert {t.id for t in turns} == {asked.id}
    assert [text_of(t) for t in [asked, *turns[:3]]] == [
        "What is the request about?",
        "Which environment does it concern?",
        "Who should hear of the answer?",
        "Anything else before I answer?",
    ]
    assert [t.status.state for t in turns] == [TaskState.TASK_STATE_INPUT_REQUIRED] * 3 + [
        TaskState.TASK_STATE_COMPLETED
    ]
    assert [p.text for a in turns[-1].artifacts for p in a.parts] == ["Answered: no."]
    assert other.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
