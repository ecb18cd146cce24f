"""The stand-in MCP server over Streamable HTTP at /mcp, with stateful sessions (Mcp-Session-Id), and its
admin routes under /_standin/mcp:

    POST /_standin/mcp/forget       drops every session: a request with an old Mcp-Session-Id gets 404
                                    and its client must initialize again, as the spec has it
    POST /_standin/mcp/extra-tool   {"enabled": bool}: adds or removes archive_note and sends
                                    notifications/tools/list_changed to the sessions that opened the
                                    standalone (GET) stream

The SDK's session manager serves the protocol; this module only runs it inside the stand-ins' lifespan,
checks the bearer token (option `mcp_token`) in front of it, and swaps it for a fresh one to forget.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any, cast

import anyio
from anyio.abc import TaskGroup
from fastapi import APIRouter, Depends, Request
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import MCPServer
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from ticketiq.standins.vendors.intake import Intake
from ticketiq.standins.vendors.mcp_notes import notebook_server, switch_extra_tool

PATH = "/mcp"
# A session's notification is dropped past this: a client gone quiet must not hold up the admin route.
NOTIFY_TIMEOUT_S = 2.0

log = logging.getLogger(__name__)


def authorized(authorization: str | None, token: str | None) -> bool:
    """Whether a request with this Authorization header may reach /mcp (open when no token is set)."""
    if not token:
        return True
    scheme, _, given = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


class McpEndpoint:
    """The ASGI app at /mcp: the bearer check, then the SDK's session manager of the moment."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake
        self.server: MCPServer
        self.server, self.notebook = notebook_server(intake)
        self.server.middleware.append(self._watch)
        # The sessions that said `notifications/initialized`: who hears a change of the tool list.
        self.listeners: set[ServerSession] = set()
        self._manager: StreamableHTTPSessionManager | None = None
        self._stop_manager: anyio.CancelScope | None = None
        self._tasks: TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serves /mcp while open; in the stand-ins app's lifespan."""
        async with anyio.create_task_group() as tasks:
            self._tasks = tasks
            await self._start_manager()
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                self._tasks = self._manager = self._stop_manager = None
                self.listeners.clear()

    async def _start_manager(self) -> None:
        # streamable_http_app() makes a fresh session manager each call (server.session_manager); its
        # Starlette app is not used: /mcp is this endpoint. No DNS-rebinding check: the stand-ins are
        # reached by other names than 127.0.0.1 (a cluster's proxy).
        self.server.streamable_http_app(
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
        )
        manager = self.server.session_manager
        assert self._tasks is not None
        stop = await self._tasks.start(_run_manager, manager)
        self._manager, self._stop_manager = manager, stop

    async def forget(self) -> None:
        """Every session ends: a fresh manager knows none of their ids (404), the old one is stopped."""
        old = self._stop_manager
        self.listeners.clear()
        await self._start_manager()
        if old is not None:
            old.cancel()

    async def switch_extra_tool(self, enabled: bool) -> int:
        """Adds or removes archive_note; answers to how many sessions the list change was handed. The SDK
        tells a server no session's end, so one that ended since its handshake counts until a forget (its
        notification is dropped by the SDK); a client without its standalone stream open misses it."""
        if not await switch_extra_tool(self.server, self.notebook, enabled):
            return 0
        sent = 0
        for session in list(self.listeners):
            try:
                with anyio.fail_after(NOTIFY_TIMEOUT_S):
                    await session.send_tool_list_changed()
                sent += 1
            except Exception as exc:  # its session ended (a closed stream) or its client stopped reading
                log.info("tools/list_changed not delivered to an MCP session: %r", exc)
                self.listeners.discard(session)
        return sent

    async def _watch(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware: announces tools.listChanged (the SDK's default says false) and notes the
        sessions that can hear it."""
        result = await call_next(ctx)
        if ctx.method == "initialize" and isinstance(result, dict):
            tools = result.get("capabilities", {}).get("tools")
            if isinstance(tools, dict):
                tools["listChanged"] = True
        elif ctx.method == "notifications/initialized":
            self.listeners.add(ctx.session)
        return result

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        if not authorized(headers.get("authorization"), self.intake.options.mcp_token):
            error = {"error": "invalid_token", "error_description": "Authorization: Bearer <token> is required"}
            refused = JSONResponse(error, status_code=401, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
            await refused(scope, receive, send)
            return
        if self._manager is None:
            await JSONResponse({"error": "the MCP server is not running"}, status_code=503)(scope, receive, send)
            return
        await self._manager.handle_request(scope, receive, send)


async def _run_manager(
    manager: StreamableHTTPSessionManager, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]
) -> None:
    with anyio.CancelScope() as stop:
        async with manager.run():
            task_status.started(stop)
            await anyio.sleep_forever()


class ExtraTool(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool


def _endpoint(request: Request) -> McpEndpoint:
    return cast(McpEndpoint, request.app.state.mcp)


EndpointDep = Annotated[McpEndpoint, Depends(_endpoint)]


def admin_router() -> APIRouter:
    api = APIRouter()

    @api.post("/forget")
    async def forget(endpoint: EndpointDep) -> dict[str, bool]:
        await endpoint.forget()
        return {"forgotten": True}

    @api.post("/extra-tool")
    async def extra_tool(change: ExtraTool, endpoint: EndpointDep) -> dict[str, Any]:
        notified = await endpoint.switch_extra_tool(change.enabled)
        tools = [tool.name for tool in await endpoint.server.list_tools()]
        return {"enabled": change.enabled, "tools": tools, "notified": notified}

    return api
