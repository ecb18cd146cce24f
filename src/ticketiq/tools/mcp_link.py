"""One MCP server as this process reaches it: one session, kept open, opened again when it is lost.

The official SDK speaks the protocol (Streamable HTTP or stdio, `mcp.ClientSession`); this keeps it alive
around the process's life:

- A keeper task opens the transport and the session, lists the tools (again on `tools/list_changed`),
  and pings the server every `PING_S`. When the session is lost (the stdio child died, the server went
  away, it forgot the session: a 404 to a request carrying its `Mcp-Session-Id`), it opens a new one,
  with backoff. A stdio server is a child of this process: started by the keeper, started again with
  backoff when it exits, stopped with the process; its stderr goes to the log, line by line.
- A server that is down never takes the process down: the link says `unreachable` with the reason, and a
  call made meanwhile fails at once, before anything is sent.
- `call` sends one `tools/call` on the open session, bounded by the caller's timeout and cancelled the
  moment the run's lease is lost; either way the SDK tells the server (`notifications/cancelled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ticketiq.runtime import stall
from ticketiq.runtime.user_agent import user_agent
from ticketiq.values.mcp_servers import Hints, ServerSpec

log = logging.getLogger(__name__)

# The last check of the call whose request is being sent (its lease and its write's window). The SDK sends each
# request from a task that runs in its sender's context (its write stream keeps the sender's contextvars), so
# the HTTP request hook reads the check of exactly the call it is about to send, and hands it to the request's
# trace: it runs again right before the head and the body are written (`_at_write`), as for vendors.
_SENDING_CHECK: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "mcp_sending_check", default=None
)
PING_S = 10.0  # how often an open session is pinged: a dead stdio child or a vanished server is found
BACKOFF_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)  # between tries to open a session again
OPEN_TIMEOUT_S = 15.0  # opening a session: the transport, initialize and the first listing


class LinkState(StrEnum):
    CONNECTING = "connecting"
    READY = "ready"
    UNREACHABLE = "unreachable"
    STOPPED = "stopped"


@dataclass(frozen=True)
class ListedTool:
    """One tool as the server lists it."""

    name: str
    description: str
    input_schema: dict[str, Any]
    hints: Hints


class NotSent(Exception):
    """The call was never sent: the server is not reachable now, or forgot the session before taking it."""


class Forgotten(NotSent):
    """The server answered 404 to our session id: it never took the request (the spec's word)."""


class McpLink:
    def __init__(self, spec: ServerSpec, on_change: Callable[[McpLink], Awaitable[None]] | None = None) -> None:
        self.spec = spec
        self.state = LinkState.CONNECTING
        self.error: str | None = None
        self.tools: dict[str, ListedTool] = {}
        self.listed = asyncio.Event()  # set once the first listing came (or the first try failed)
        self._on_change = on_change
        self._session: ClientSession | None = None
        self._reopen = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stderr: _StderrToLog | None = None
        self._forgot_404 = False  # the open session's id was answered 404: the server forgot it

    @property
    def name(self) -> str:
        return self.spec.name

    def start(self) -> None:
        if self.spec.command:
            self._stderr = _StderrToLog(self.spec.name)
        self._task = asyncio.create_task(self._keep(), name=f"mcp-link-{self.spec.name}")

    async def stop(self) -> None:
        self._stopping.set()
        self._reopen.set()
        if self._task is not None:
            try:
                async with asyncio.timeout(5.0):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
        if self._stderr is not None:
            self._stderr.close()
        self.state = LinkState.STOPPED

    def view(self) -> dict[str, Any]:
        """What GET /v1/processes and the console say of it (never a header or an environment value)."""
        return {"name": self.spec.name, "transport": self.spec.transport, "where": self.spec.where,
                "state": self.state.value, "error": self.error, "tools": sorted(self.tools)}  # fmt: skip

    # ----- a call ---------------------------------------------------------------------------------

    async def call(
        self, tool: str, args: dict[str, Any], timeout_s: float, lost: asyncio.Event | None,
        before_send: Callable[[], None], before_write: Callable[[], None] | None = None,
    ) -> types.CallToolResult:  # fmt: skip
        """One `tools/call`. Raises NotSent when nothing reached the server; MCPError when the server
        answered an error or the answer never came (timed out, the session closed); the fence's
        exception (from `before_send`) when the lease is lost before or while it is in flight.
        `before_write`: the check as the request's bytes are written (a write's window as well as its
        lease, tools/http.py: last_check); `before_send` when None. A failure after it refused is an
        MCPError all the same, unless the lease is lost: whether a byte went is not told apart."""
        ends = time.monotonic() + timeout_s
        try:
            return await self._call_once(tool, args, timeout_s, lost, before_send, before_write)
        except Forgotten:
            # The server never took it (a 404 to our session id): sent once more on the session opened now.
            await self._ready_again(ends - time.monotonic())
            left = max(0.0, ends - time.monotonic())
            return await self._call_once(tool, args, left, lost, before_send, before_write)

    async def _ready_again(self, wait_s: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, wait_s)):
                while self._session is None or self.state is not LinkState.READY or self._reopen.is_set():
                    await asyncio.sleep(0.05)

    async def _call_once(
        self, tool: str, args: dict[str, Any], timeout_s: float, lost: asyncio.Event | None,
        before_send: Callable[[], None], before_write: Callable[[], None] | None,
    ) -> types.CallToolResult:  # fmt: skip
        if self.state is LinkState.CONNECTING or self._reopen.is_set():
            await self._ready_again(min(timeout_s, OPEN_TIMEOUT_S))  # a session being opened: wait for it
        session = self._session
        if session is None or self.state is not LinkState.READY or self._reopen.is_set():
            state = "opening a new session" if self.state is LinkState.READY else self.state.value
            raise NotSent(f"MCP server {self.name} is {state}" + (f": {self.error}" if self.error else ""))
        before_send()  # I3: the lease checked before the request is handed to the SDK, and again as it goes out
        marked = _SENDING_CHECK.set(before_write or before_send)
        try:  # the task takes a copy of this context, with the check, and so does the request it sends
            sending = asyncio.ensure_future(session.call_tool(tool, args, read_timeout_seconds=timeout_s))
        finally:
            _SENDING_CHECK.reset(marked)
        if lost is None:
            return await self._checked(sending, before_send)
        watching = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({sending, watching}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watching.cancel()
        if not sending.done():
            # The lease is lost: cancelling the request makes the SDK send `notifications/cancelled`.
            sending.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sending
            before_send()  # raises: the lease is lost
        return await self._checked(sending, before_send)

    async def _checked(self, sending: asyncio.Future[Any], before_send: Callable[[], None]) -> types.CallToolResult:
        """The answer; a failure while the lease is lost is the fence's (its request may not have gone out: the
        request hook refused it), never an outcome of the call."""
        try:
            return await self._answer(sending)
        except MCPError:
            before_send()
            raise

    async def _answer(self, sending: asyncio.Future[Any]) -> types.CallToolResult:
        try:
            result = await sending
        except MCPError as exc:
            if self._forgot_404:
                self._reopen.set()  # the server forgot the session: a new one is opened
            if self._forgotten(exc):
                self._reopen.set()
                raise Forgotten(f"MCP server {self.name} forgot the session before it took the call") from exc
            if exc.code == types.CONNECTION_CLOSED:
                self._reopen.set()
            raise
        if not isinstance(result, types.CallToolResult):
            raise MCPError(types.INTERNAL_ERROR, f"MCP server {self.name} answered a {type(result).__name__}")
        return result

    def _forgotten(self, exc: MCPError) -> bool:
        """The answer to this very request was a 404 to our session id: the server never took it (the spec).
        The SDK turns that 404 into this error (the server's own body, or its stand-in); any other error,
        a closed connection above all, may follow a request the server did take."""
        return (
            self._forgot_404
            and exc.code == types.INVALID_REQUEST
            and exc.message in ("Session not found", "Session terminated")
        )

    # ----- the keeper -------------------------------------------------------------------------------

    async def _keep(self) -> None:
        tries = 0
        while not self._stopping.is_set():
            try:
                async with self._open() as session:
                    tries = 0
                    self._forgot_404 = False
                    self._session = session
                    await self._set(LinkState.READY, None)
                    self.listed.set()
                    await self._hold(session)
            except Exception as exc:  # a server down never takes the process down
                why = _describe(exc)
                if not self._stopping.is_set():
                    log.warning("MCP server %s (%s) is unreachable: %s", self.name, self.spec.where, why)
                    await self._set(LinkState.UNREACHABLE, why)
            finally:
                self._session = None
            self.listed.set()
            if self._stopping.is_set():
                break
            wait = BACKOFF_S[min(tries, len(BACKOFF_S) - 1)]
            tries += 1
            self._reopen.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._stopping.wait()

    async def _hold(self, session: ClientSession) -> None:
        """Keep the session until it is lost, asked to be opened again, or the process stops."""
        while not self._reopen.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(PING_S):
                    await self._reopen.wait()
            if self._reopen.is_set():
                break
            await session.send_ping()  # raises when the server is gone: the session is opened again
        if not self._stopping.is_set():
            log.info("MCP server %s: opening a new session", self.name)
            await self._set(LinkState.CONNECTING, None)

    def _headers(self) -> httpx2.Headers:
        """The server's headers over this process's User-Agent, which names it as every vendor call does
        (a User-Agent of the server's, in any case, replaces it)."""
        headers = httpx2.Headers({"User-Agent": user_agent()})
        headers.update(self.spec.headers)
        return headers

    @asynccontextmanager
    async def _open(self) -> AsyncIterator[ClientSession]:
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(OPEN_TIMEOUT_S):
                if self.spec.url is not None:
                    http = await stack.enter_async_context(
                        httpx2.AsyncClient(
                            headers=self._headers(),
                            timeout=httpx2.Timeout(30.0, read=300.0),
                            # No request leaves a stalled process (runtime/stall.py), nor a call's request
                            # once its run's lease is lost (I3): checked as its bytes are about to go out.
                            event_hooks={
                                "request": [stall.before_request, _last_moment],
                                "response": [self._heard_response],
                            },
                        )
                    )
                    read, write = await stack.enter_async_context(
                        streamable_http_client(self.spec.url, http_client=http)
                    )
                else:
                    assert self._stderr is not None
                    params = StdioServerParameters(
                        command=self.spec.command[0], args=list(self.spec.command[1:]), env=dict(self.spec.env) or None
                    )
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=self._stderr.file))
                session = await stack.enter_async_context(ClientSession(read, write, message_handler=self._heard))
                await session.initialize()
                await self._list(session)
            yield session

    async def _list(self, session: ClientSession) -> None:
        listed: dict[str, ListedTool] = {}
        cursor: str | None = None
        while True:
            page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
            for tool in page.tools:
                notes = tool.annotations
                hints = Hints(
                    read_only=notes.read_only_hint if notes else None,
                    destructive=notes.destructive_hint if notes else None,
                    idempotent=notes.idempotent_hint if notes else None,
                )
                schema = dict(tool.input_schema) if tool.input_schema else {"type": "object"}
                listed[tool.name] = ListedTool(tool.name, tool.description or "", schema, hints)
            cursor = page.next_cursor
            if not cursor:
                break
        changed = listed != self.tools
        self.tools = listed
        if changed and self._on_change is not None:
            await self._on_change(self)

    async def _heard(self, message: Any) -> None:
        """What the server says unasked: a changed tool list is listed again."""
        if isinstance(message, types.ToolListChangedNotification) and self._session is not None:
            session = self._session
            asyncio.get_running_loop().create_task(self._relist(session))
        elif isinstance(message, Exception):
            log.info("MCP server %s: the transport said %s", self.name, _describe(message))

    async def _relist(self, session: ClientSession) -> None:
        try:
            await self._list(session)
            log.info("MCP server %s listed its tools again: %s", self.name, ", ".join(sorted(self.tools)))
        except Exception as exc:
            log.warning("MCP server %s: listing its tools again failed: %s", self.name, _describe(exc))

    async def _heard_response(self, response: httpx2.Response) -> None:
        if response.status_code == 404 and "mcp-session-id" in response.request.headers:
            self._forgot_404 = True
            if response.request.method != "POST":
                # A POST's own answer carries the 404 to its caller, which opens a new session after it
                # read it (opening one now would close the old before that answer is read).
                self._reopen.set()

    async def _set(self, state: LinkState, error: str | None) -> None:
        if (state, error) == (self.state, self.error):
            return
        self.state, self.error = state, error
        if self._on_change is not None:
            try:
                await self._on_change(self)
            except Exception:
                log.exception("MCP server %s: reporting its state failed", self.name)


async def _last_moment(request: httpx2.Request) -> None:
    """An httpx2 request hook: the check of the call this request carries, before the request takes a
    connection, and handed to its trace for the moments its bytes are written. Raising sends nothing (or
    cuts the request off before its body, which the server then never takes); the SDK then ends the
    session, and the link opens a new one."""
    check = _SENDING_CHECK.get()
    if check is not None:
        check()
        request.extensions["trace"] = _at_write(check)


def _at_write(check: Callable[[], None]) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    """httpcore's trace, which it awaits right before it writes the request's head, and again its body: the
    connect, a TLS handshake and a wait for a pooled connection all lie before these, and nothing suspends
    between them and the socket's send (unless the socket pushes back), so a process frozen after the hook's
    check and let go on later is checked again here (I3, I14)."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event.endswith((".send_request_headers.started", ".send_request_body.started")):
            stall.check()  # as the request hook does: a process that stalled past its leases sends nothing
            check()

    return trace


def _describe(exc: BaseException) -> str:
    """One line: an exception group (anyio's task groups raise them) is described by its first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"{exc.message} (code {exc.code})"
    if isinstance(exc, TimeoutError):
        return "no answer in time"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class _StderrToLog:
    """A stdio server's stderr, read line by line into the log (a thread: the pipe outlives each child)."""

    def __init__(self, name: str) -> None:
        read_fd, write_fd = os.pipe()
        self.file = os.fdopen(write_fd, "w")
        self._read = os.fdopen(read_fd, "r", errors="replace")
        self._thread = threading.Thread(target=self._pump, args=(name,), name=f"mcp-stderr-{name}", daemon=True)
        self._thread.start()

    def _pump(self, name: str) -> None:
        with self._read:  # ends when every child's copy and ours are closed
            for line in self._read:
                if line.strip():
                    log.info("MCP server %s says: %s", name, line.rstrip())

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.file.close()
