"""The stand-in MCP server (issue 33), driven by the official SDK's client over real sockets and a real
stdio subprocess: its tools and their annotations, every call in the write log, add_note's dedupe, the
`hold` fault, forgetting sessions, the bearer token and the extra tool's list change."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.session import IncomingMessage
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, ToolListChangedNotification

import ticketiq
from tests.support.standins import Standins

MCP_SESSION_ID = "mcp-session-id"


@contextlib.asynccontextmanager
async def mcp_session(
    standins: Standins,
    *,
    token: str | None = None,
    seen: list[Any] | None = None,
    session_ids: list[str] | None = None,
    terminate_on_close: bool = True,
) -> AsyncIterator[ClientSession]:
    """An initialized client session on the stand-ins' /mcp."""

    async def note_session(response: httpx2.Response) -> None:
        if session_ids is not None and MCP_SESSION_ID in response.headers:
            session_ids.append(response.headers[MCP_SESSION_ID])

    async def note_message(message: IncomingMessage) -> None:
        if seen is not None:
            seen.append(message)

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [note_session]}) as http,
        streamable_http_client(standins.mcp_url, http_client=http, terminate_on_close=terminate_on_close) as (
            read,
            write,
        ),
        ClientSession(read, write, message_handler=note_message) as session,
    ):
        await session.initialize()
        yield session


async def _open(standins: Standins, token: str) -> None:
    with anyio.fail_after(10):
        async with mcp_session(standins, token=token):
            pass


def structured(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert isinstance(result.content[0], TextContent)
    assert json.loads(result.content[0].text) == result.structured_content  # the text is the same JSON
    assert result.structured_content is not None
    body: dict[str, Any] = result.structured_content
    return body


async def test_the_four_tools_with_their_annotations_and_schemas(standins: Standins) -> None:
    async with mcp_session(standins) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert set(tools) == {"get_note", "set_note", "delete_note", "add_note"}
    get, put, delete, add = (tools[name] for name in ("get_note", "set_note", "delete_note", "add_note"))
    assert get.annotations is not None and get.annotations.read_only_hint is True
    assert put.annotations is not None
    assert (put.annotations.read_only_hint, put.annotations.idempotent_hint, put.annotations.destructive_hint) == (
        False,
        True,
        False,
    )
    assert delete.annotations is not None
    assert (delete.annotations.destructive_hint, delete.annotations.idempotent_hint) == (True, False)
    assert add.annotations is None  # a plain write to a client
    assert put.input_schema["required"] == ["note_id", "text"]
    assert add.input_schema["required"] == ["notebook", "text"]
    assert set(add.input_schema["properties"]) == {"notebook", "text", "request_id"}
    assert all(tool.description for tool in tools.values())


async def test_each_call_answers_and_lands_in_the_write_log(standins: Standins) -> None:
    async with mcp_session(standins) as session:
        assert structured(await session.call_tool("set_note", {"note_id": "n1", "text": "hello"}))["created"] is True
        again = structured(await session.call_tool("set_note", {"note_id": "n1", "text": "hello"}))
        assert again == {"note_id": "n1", "text": "hello", "created": False}
        assert structured(await session.call_tool("get_note", {"note_id": "n1"})) == {"note_id": "n1", "text": "hello"}
        assert structured(await session.call_tool("delete_note", {"note_id": "n1"}))["existed"] is True
        assert structured(await session.call_tool("delete_note", {"note_id": "n1"}))["existed"] is False
        missing = await session.call_tool("get_note", {"note_id": "n1"})
    assert missing.is_error
    assert isinstance(missing.content[0], TextContent) and missing.content[0].text == "no note n1"

    deletes = await standins.writes(vendor="mcp", operation="delete_note", target="n1")
    assert [(w["effect"], w["status"], w["body"]) for w in deletes] == [
        ("applied", 200, {"note_id": "n1"}),
        ("applied", 404, {"note_id": "n1"}),
    ]
    logged = [(w["operation"], w["effect"]) for w in await standins.writes(vendor="mcp")]
    assert logged == [
        ("set_note", "applied"),
        ("set_note", "applied"),
        ("get_note", "applied"),
        ("delete_note", "applied"),
        ("delete_note", "applied"),
        ("get_note", "refused"),
    ]
    sets = await standins.writes(vendor="mcp", operation="set_note")
    assert sets[0]["body"] == {"note_id": "n1", "text": "hello"}


async def test_add_note_is_deduped_on_its_request_id(standins: Standins) -> None:
    args = {"notebook": "ops", "text": "restarted the pool", "request_id": "r-1"}
    async with mcp_session(standins) as session:
        first = structured(await session.call_tool("add_note", args))
        repeat = structured(await session.call_tool("add_note", args))
        other = structured(await session.call_tool("add_note", {"notebook": "ops", "text": "restarted the pool"}))
        changed = await session.call_tool("add_note", {**args, "text": "something else"})
        text = structured(await session.call_tool("get_note", {"note_id": first["note_id"]}))["text"]
    assert first["deduped"] is False and repeat == {**first, "deduped": True}
    assert other["note_id"] != first["note_id"]  # no request_id: a plain write, a new note each time
    assert changed.is_error
    assert text == "restarted the pool"
    adds = await standins.writes(vendor="mcp", operation="add_note", target="ops")
    assert [(w["key"], w["effect"], w["ref"]) for w in adds] == [
        ("r-1", "applied", first["note_id"]),
        ("r-1", "deduped", first["note_id"]),
        (None, "applied", other["note_id"]),
        ("r-1", "refused", first["note_id"]),
    ]


async def test_faults_apply_to_mcp_calls(standins: Standins) -> None:
    await standins.fault("mcp", "500", operation="set_note")
    await standins.fault("mcp", "500_after_apply", operation="delete_note")
    async with mcp_session(standins) as session:
        with pytest.raises(MCPError) as refused:
            await session.call_tool("set_note", {"note_id": "n2", "text": "x"})
        assert refused.value.message == "Internal server error"
        await standins.fault("mcp", "stall", operation="get_note", stall_s=0.3)
        started = anyio.current_time()
        assert (await session.call_tool("get_note", {"note_id": "n2"})).is_error  # answered after the stall
        assert anyio.current_time() - started >= 0.3
        structured(await session.call_tool("set_note", {"note_id": "n2", "text": "x"}))
        with pytest.raises(MCPError):
            await session.call_tool("delete_note", {"note_id": "n2"})
        assert (await session.call_tool("get_note", {"note_id": "n2"})).is_error  # deleted all the same
    logged = [(w["operation"], w["effect"]) for w in await standins.writes(vendor="mcp")]
    assert logged == [
        ("set_note", "refused"),
        ("get_note", "refused"),
        ("set_note", "applied"),
        ("delete_note", "applied"),
        ("get_note", "refused"),
    ]


async def test_hold_records_the_write_and_then_holds_the_answer(standins: Standins) -> None:
    await standins.fault("mcp", "hold", operation="delete_note", stall_s=1.5)
    async with mcp_session(standins) as session:
        await session.call_tool("set_note", {"note_id": "n3", "text": "x"})
        async with anyio.create_task_group() as tasks:
            answers: list[CallToolResult] = []

            async def call() -> None:
                answers.append(await session.call_tool("delete_note", {"note_id": "n3"}))

            tasks.start_soon(call)
            with anyio.fail_after(1.2):
                while not await standins.writes(vendor="mcp", operation="delete_note"):
                    await anyio.sleep(0.05)
            assert answers == []  # recorded, not yet answered
        assert structured(answers[0])["existed"] is True


async def test_a_held_call_whose_client_went_away_leaves_the_server_serving(standins: Standins) -> None:
    await standins.fault("mcp", "hold", operation="delete_note", stall_s=0.5)
    # The client leaves without ending its session (as a killed process does): its request's stream is cut.
    async with mcp_session(standins, terminate_on_close=False) as session:
        await session.call_tool("set_note", {"note_id": "n4", "text": "x"})
        with anyio.move_on_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(session.call_tool, "delete_note", {"note_id": "n4"})
                while not await standins.writes(vendor="mcp", operation="delete_note"):
                    await anyio.sleep(0.05)
                tasks.cancel_scope.cancel()
    await anyio.sleep(0.8)  # the hold ends and its answer has no one to go to
    async with mcp_session(standins) as session:
        assert (await session.call_tool("get_note", {"note_id": "n4"})).is_error
    assert len(await standins.writes(vendor="mcp", operation="delete_note")) == 1


# A client process that calls delete_note and waits for its answer (killed before it comes).
_CALLER = """
import sys, anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main() -> None:
    async with streamable_http_client(sys.argv[1]) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.call_tool("delete_note", {"note_id": sys.argv[2]})

anyio.run(main)
"""


async def test_a_caller_killed_while_its_answer_is_held_leaves_the_write_landed(standins: Standins) -> None:
    await standins.fault("mcp", "hold", operation="delete_note", stall_s=30)
    async with mcp_session(standins) as session:
        await session.call_tool("set_note", {"note_id": "n9", "text": "x"})
    caller = await anyio.open_process([sys.executable, "-c", _CALLER, standins.mcp_url, "n9"])
    async with caller:
        with anyio.fail_after(10):
            while not await standins.writes(vendor="mcp", operation="delete_note"):
                await anyio.sleep(0.05)
        caller.kill()  # SIGKILL: no DELETE of its session, its connection just drops
        assert await caller.wait() == -signal.SIGKILL
    async with mcp_session(standins) as session:  # served meanwhile; the held answer is cut at shutdown
        assert (await session.call_tool("get_note", {"note_id": "n9"})).is_error
    assert [w["effect"] for w in await standins.writes(vendor="mcp", operation="delete_note")] == ["applied"]


async def test_forget_drops_the_sessions_and_an_old_id_gets_404(standins: Standins) -> None:
    session_ids: list[str] = []
    async with mcp_session(standins, session_ids=session_ids, terminate_on_close=False) as session:
        structured(await session.call_tool("set_note", {"note_id": "n5", "text": "x"}))
        await standins.mcp_forget()
        with pytest.raises(MCPError) as gone:
            await session.call_tool("get_note", {"note_id": "n5"})
        assert gone.value.message == "Session not found"  # the server's 404
    old = session_ids[0]
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {
        MCP_SESSION_ID: old,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    async with httpx2.AsyncClient() as http:
        response = await http.post(standins.mcp_url, json=ping, headers=headers)
    assert response.status_code == 404
    async with mcp_session(standins) as session:  # a new session works
        assert structured(await session.call_tool("get_note", {"note_id": "n5"}))["text"] == "x"


async def test_the_bearer_token_is_asked_once_set(standins: Standins) -> None:
    await standins.options(mcp_token="s3cret")
    async with httpx2.AsyncClient() as http:
        response = await http.post(standins.mcp_url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    # The SDK's client answers its initialize with the 401 as an error, out of its task groups.
    refused = pytest.RaisesExc(MCPError, check=lambda exc: exc.message == "Server returned an error response")
    with pytest.RaisesGroup(pytest.RaisesGroup(refused)):
        await _open(standins, token="wrong")
    async with mcp_session(standins, token="s3cret") as session:
        structured(await session.call_tool("set_note", {"note_id": "n6", "text": "x"}))
    await standins.options(mcp_token="")
    async with mcp_session(standins) as session:
        structured(await session.call_tool("get_note", {"note_id": "n6"}))


async def test_the_extra_tool_comes_and_goes_with_a_list_change(standins: Standins) -> None:
    seen: list[Any] = []
    async with mcp_session(standins, seen=seen) as session:
        tools_capability = (await session.initialize()).capabilities.tools  # the handshake's, kept
        assert tools_capability is not None and tools_capability.list_changed is True
        await anyio.sleep(0.2)  # the client opens its standalone stream after the handshake
        assert (await standins.mcp_extra_tool(True))["notified"] == 1
        with anyio.fail_after(5):
            while not any(isinstance(item, ToolListChangedNotification) for item in seen):
                await anyio.sleep(0.05)
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert tools["archive_note"].annotations is not None
        assert tools["archive_note"].annotations.destructive_hint is True
        await session.call_tool("set_note", {"note_id": "n7", "text": "x"})
        assert structured(await session.call_tool("archive_note", {"note_id": "n7"}))["existed"] is True
        await standins.mcp_extra_tool(False)
        assert "archive_note" not in {tool.name for tool in (await session.list_tools()).tools}
    assert len(await standins.writes(vendor="mcp", operation="archive_note", target="n7")) == 1
    # Its session is over: the change reaches no one, and the route answers all the same.
    with anyio.fail_after(5):
        assert "archive_note" in (await standins.mcp_extra_tool(True))["tools"]


async def test_the_stdio_server_records_into_the_same_store(standins: Standins, db_url: str, tmp_path: Path) -> None:
    src = str(Path(ticketiq.__file__).parent.parent)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ticketiq.standins.mcp_stdio"],
        env={"TICKETIQ_STANDIN_DATABASE_URL": db_url, "PYTHONPATH": src},
    )
    with (tmp_path / "stderr").open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            assert {tool.name for tool in (await session.list_tools()).tools} == {
                "get_note",
                "set_note",
                "delete_note",
                "add_note",
            }
            structured(await session.call_tool("set_note", {"note_id": "n8", "text": "over stdio"}))
    writes = await standins.writes(vendor="mcp", operation="set_note", target="n8")
    assert [(w["effect"], w["body"]) for w in writes] == [("applied", {"note_id": "n8", "text": "over stdio"})]
    async with mcp_session(standins) as session:  # the HTTP server reads what the stdio one wrote
        assert structured(await session.call_tool("get_note", {"note_id": "n8"}))["text"] == "over stdio"
