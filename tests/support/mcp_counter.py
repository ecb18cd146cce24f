"""A small MCP server for the client's tests, built with the official SDK: a read, an idempotent write and
a destructive one over a counter. Served over Streamable HTTP in the test's process (`serve_http`), or run
as a stdio server: `python tests/support/mcp_counter.py` (each call appended to $COUNTER_LOG)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


@dataclass
class Counter:
    count: int = 0
    flags: dict[str, str] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    hold: asyncio.Event | None = None  # set: a bump waits for it after counting (the answer held)
    cancelled: int = 0  # bumps cancelled by the client (notifications/cancelled) while held
    # Sessions the server has forgotten (`forget`): a request naming one is answered 404, as a restarted
    # server that keeps no sessions answers (the spec: the client must initialize again).
    sessions: set[str] = field(default_factory=set)
    forgotten: set[str] = field(default_factory=set)

    def forget(self) -> None:
        self.forgotten |= self.sessions

    def log(self, tool: str, args: dict[str, Any]) -> None:
        self.calls.append((tool, args))
        path = os.environ.get("COUNTER_LOG")
        if path:
            with open(path, "a") as out:
                out.write(json.dumps([tool, args]) + "\n")
        if os.environ.get("COUNTER_SAY"):
            print(f"counter heard {tool}", file=sys.stderr, flush=True)


def build(counter: Counter) -> MCPServer:
    server = MCPServer("counter")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def read_count() -> dict[str, Any]:
        """Read the counter."""
        counter.log("read_count", {})
        return {"count": counter.count}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True, destructive_hint=False))
    def set_flag(name: str, value: str) -> dict[str, Any]:
        """Set a flag to a value."""
        counter.log("set_flag", {"name": name, "value": value})
        counter.flags[name] = value
        return {"flags": dict(counter.flags)}

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
    async def bump(amount: int, request_id: str = "") -> dict[str, Any]:
        """Add to the counter."""
        counter.log("bump", {"amount": amount, "request_id": request_id})
        counter.count += amount
        if counter.hold is not None:
            try:
                await counter.hold.wait()
            except asyncio.CancelledError:
                counter.cancelled += 1
                raise
        return {"count": counter.count}

    return server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_http(counter: Counter, port: int | None = None) -> AsyncIterator[str]:
    """The server on a real socket in this event loop; yields its /mcp URL."""
    port = port or free_port()
    app = _forgetting(build(counter).streamable_http_app(), counter)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


def _forgetting(app: Any, counter: Counter) -> Any:
    async def forgetting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            session = dict(scope["headers"]).get(b"mcp-session-id", b"").decode()
            if session in counter.forgotten:
                body = json.dumps(
                    {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}
                )
                await send({"type": "http.response.start", "status": 404,
                            "headers": [(b"content-type", b"application/json")]})  # fmt: skip
                await send({"type": "http.response.body", "body": body.encode()})
                return
            if session:
                counter.sessions.add(session)
        await app(scope, receive, send)

    return forgetting


if __name__ == "__main__":
    build(Counter()).run("stdio")
