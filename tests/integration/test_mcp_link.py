"""One session per MCP server, kept: the official SDK's client against a real server of the SDK, over
Streamable HTTP on a real socket and over stdio as a child of this process (tests/support/mcp_counter.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support.mcp_counter import Counter, free_port, serve_http
from tests.support.standins import Standins
from ticketiq.errors import LeaseLost
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, Registry, SendWindow, ToolClass
from ticketiq.tools.mcp_tools import McpServers
from ticketiq.values.mcp_servers import parse

COUNTER = Path(__file__).parents[1] / "support" / "mcp_counter.py"
SETTINGS = Settings()


async def call(registry: Registry, name: str, args: dict[str, object], **extra: object) -> Outcome:
    async with httpx.AsyncClient() as http:
        ctx = CallContext(run_id="r1", tool=name, args=args, key="tqkey", http=http, settings=SETTINGS, **extra)  # type: ignore[arg-type]
        return await registry.tools[name].executor(ctx)


@contextlib.asynccontextmanager
async def linked(
    section: dict[str, Any], named: list[str] | None = None, wait_s: float = 10
) -> AsyncIterator[tuple[McpServers, Registry]]:
    """The links to the servers of an agents file's `mcp_servers:` section and their tools in a registry of
    their own (with `named`, the tools an agent names), stopped at the end whatever happened."""
    servers = McpServers(parse(section, "agents.yaml"))
    await servers.start(wait_s)
    try:
        registry = Registry()
        servers.register(registry, named or [])
        yield servers, registry
    finally:
        await servers.stop()


async def until(check: Callable[[], bool], timeout_s: float = 20.0) -> None:
    ends = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < ends, "not in time"
        await asyncio.sleep(0.05)


async def test_a_trusted_http_servers_tools_are_classed_by_their_hints_and_called() -> None:
    counter = Counter()
    async with serve_http(counter) as url:
        trusted = {"counter": {"url": url, "trust_annotations": True}}
        async with linked(trusted, named=["counter__bump", "counter__nothing"]) as (servers, registry):
            classes = {name: tool.tool_class for name, tool in registry.tools.items()}
            assert classes == {"counter__read_count": ToolClass.READ, "counter__set_flag": ToolClass.IDEMPOTENT_WRITE,
                               "counter__bump": ToolClass.WRITE, "counter__nothing": ToolClass.WRITE}  # fmt: skip
            (unlisted,) = servers.unlisted()
            assert unlisted == "MCP server counter does not list the tool nothing (counter.nothing); it lists: " + (
                "bump, read_count, set_flag"
            )
            assert (await call(registry, "counter__bump", {"amount": 3})).result == {"count": 3}
            assert (await call(registry, "counter__read_count", {})).result == {"count": 3}
            refused = await call(registry, "counter__bump", {"amount": "three"})  # checked before it is sent
            assert not refused.ok and "arguments rejected" in (refused.error or "")
            assert [name for name, _ in counter.calls] == ["bump", "read_count"]
            (view,) = servers.views()
            assert view["state"] == "ready" and view["tools"] == ["bump", "read_count", "set_flag"]


async def test_an_untrusted_servers_every_tool_is_a_write() -> None:
    async with serve_http(Counter()) as url:
        told = {"counter": {"url": url, "tools": {"read_count": {"class": "read"}}}}
        async with linked(told) as (_servers, registry):
            assert registry.tools["counter__set_flag"].tool_class is ToolClass.WRITE
            assert registry.tools["counter__read_count"].tool_class is ToolClass.READ  # the operator's word


async def test_a_server_that_forgets_the_session_gets_a_new_one_and_the_call_is_sent_once() -> None:
    counter = Counter()
    async with serve_http(counter) as url, linked({"counter": {"url": url}}) as (_servers, registry):
        assert (await call(registry, "counter__bump", {"amount": 1})).ok
        counter.forget()  # a 404 to our session id from now on: it never takes such a request
        outcome = await call(registry, "counter__bump", {"amount": 1})
        assert outcome.ok and outcome.result == {"count": 2}, outcome
        assert [name for name, _ in counter.calls] == ["bump", "bump"]  # each taken once
        assert len(counter.sessions - counter.forgotten) == 1  # on a session opened anew


async def test_a_server_down_never_takes_the_process_down_and_is_found_when_it_comes() -> None:
    port = free_port()
    servers = McpServers(parse({"counter": {"url": f"http://127.0.0.1:{port}/mcp"}}, "a"))
    await servers.start(5)
    try:
        (view,) = servers.views()
        assert view["state"] == "unreachable" and view["error"]
        registry = Registry()
        servers.register(registry, ["counter__bump"])  # named by an agent: registered, a write until listed
        outcome = await call(registry, "counter__bump", {"amount": 1})
        assert not outcome.ok and not outcome.uncertain  # never sent: no doubt about it
        assert "MCP server counter is unreachable" in (outcome.error or "")
        counter = Counter()
        async with serve_http(counter, port):
            await until(lambda: servers.views()[0]["state"] == "ready", 40)
            assert (await call(registry, "counter__bump", {"amount": 2})).result == {"count": 2}
    finally:
        await servers.stop()


async def test_a_call_is_cancelled_at_the_server_when_the_lease_is_lost() -> None:
    counter = Counter(hold=asyncio.Event())
    async with serve_http(counter) as url, linked({"counter": {"url": url}}) as (_servers, registry):
        lost = asyncio.Event()

        def check() -> None:
            if lost.is_set():
                raise LeaseLost("r1", "the test lost it")

        sending = asyncio.create_task(call(registry, "counter__bump", {"amount": 1}, lost=lost, before_send=check))
        await until(lambda: len(counter.calls) == 1)
        lost.set()
        with pytest.raises(LeaseLost):
            await sending
        await until(lambda: counter.cancelled == 1)  # notifications/cancelled reached the tool


async def test_a_stdio_server_is_a_child_started_again_when_it_dies_and_stopped_with_us(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="ticketiq.tools.mcp_link")
    command = [sys.executable, "-P", str(COUNTER)]  # -P: its folder's http.py must not shadow the stdlib's
    async with linked({"local": {"command": command, "env": {"COUNTER_SAY": "1"}}}, wait_s=20) as (servers, registry):
        assert (await call(registry, "local__bump", {"amount": 4})).result == {"count": 4}
        await until(lambda: "MCP server local says: counter heard bump" in caplog.text)  # its stderr, logged
        (child,) = counters()
        child.kill()  # our own child, by its pid
        await until(lambda: bool(counters()) and counters()[0].pid != child.pid, 40)
        await until(lambda: servers.views()[0]["state"] == "ready", 40)
        assert (await call(registry, "local__read_count", {})).result == {"count": 0}  # a new child
        (again,) = counters()
    await until(lambda: again.pid not in [p.pid for p in counters()], 10)


def counters() -> list[psutil.Process]:
    """This process's live children that run the counter server (a zombie is not live)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and str(COUNTER) in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


async def test_the_stand_in_servers_changed_list_is_listed_again_and_a_forgotten_session_opened_anew(
    standins: Standins,
) -> None:
    """Against the stand-ins' own MCP server: `notifications/tools/list_changed` makes the link list again
    (the registry gains and loses the tool), and `forget` (every session dropped) is met with a new one."""
    async with linked({"notes": {"url": standins.mcp_url, "trust_annotations": True}}) as (_servers, registry):
        assert "notes__archive_note" not in registry.tools
        await standins.mcp_extra_tool(True)
        await until(lambda: "notes__archive_note" in registry.tools)
        assert registry.tools["notes__archive_note"].tool_class is ToolClass.WRITE  # destructive
        await standins.mcp_forget()
        outcome = await call(registry, "notes__set_note", {"note_id": "n-forget", "text": "kept"})
        assert outcome.ok, outcome  # the call met the 404, was never taken, and went out on a new session
        [written] = await standins.writes(vendor="mcp", operation="set_note", target="n-forget")
        assert written["effect"] == "applied"


async def test_a_write_whose_window_ends_in_flight_is_cancelled_at_the_server_and_left_in_doubt() -> None:
    """I14: a write's try lasts at most until its budget ends; then the SDK tells the server
    (`notifications/cancelled`) and the outcome is uncertain (settled, never resent blindly)."""
    counter = Counter(hold=asyncio.Event())
    async with serve_http(counter) as url, linked({"counter": {"url": url}}) as (_servers, registry):
        window = SendWindow(budget_ends=time.monotonic() + 1.0, lease_deadline=time.monotonic() + 60)
        began = time.monotonic()
        outcome = await call(registry, "counter__bump", {"amount": 1}, window=window)
        assert time.monotonic() - began < 5
        assert not outcome.ok and outcome.uncertain, outcome  # it reached the server: in doubt
        await until(lambda: counter.cancelled == 1)


async def test_a_calls_request_is_not_sent_once_its_lease_is_lost_before_its_bytes_go_out() -> None:
    """I3 at the last moment: a process stopped after the call was handed to the SDK and before its request
    went out (the lease checked then passed) sends nothing once it goes on with the lease gone: the check
    runs again in the request hook, in the call's own context."""
    counter = Counter()
    async with serve_http(counter) as url, linked({"counter": {"url": url}}) as (_servers, registry):
        checks = 0

        def lost_by_then() -> None:
            nonlocal checks
            checks += 1
            if checks > 1:  # passed when handed over; lost when the request is about to go
                raise LeaseLost("r1", "the lease lapsed while the process was stopped")

        with pytest.raises(LeaseLost):
            await call(registry, "counter__bump", {"amount": 1}, before_send=lost_by_then)
        assert counter.calls == []  # the server never got it
        # The next call waits for the session opened anew, and goes out on it.
        assert (await call(registry, "counter__bump", {"amount": 2})).result == {"count": 2}


async def test_a_calls_request_is_checked_again_as_its_bytes_are_written_after_the_request_hook() -> None:
    """I3, I14 as the bytes go: between the request hook and the write lie the wait for a pooled connection,
    the connect and a TLS handshake, where a process may be stopped. The call's check runs again right
    before the request's head is written (httpcore's trace): lost by then, the server never gets it."""
    counter = Counter()
    async with serve_http(counter) as url, linked({"counter": {"url": url}}) as (_servers, registry):
        checks = 0

        def lost_after_the_hook() -> None:
            nonlocal checks
            checks += 1
            if checks > 2:  # passed when handed over and in the request hook; lost as the head is written
                raise LeaseLost("r1", "the lease lapsed while the process was stopped")

        with pytest.raises(LeaseLost):
            await call(registry, "counter__bump", {"amount": 1}, before_send=lost_after_the_hook)
        assert counter.calls == []  # the server never got it
        assert (await call(registry, "counter__bump", {"amount": 2})).result == {"count": 2}
