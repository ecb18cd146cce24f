"""The stand-in servers (model and vendors) in the test's event loop, on a real loopback socket.

The `standins` fixture is for the root conftest's `pytest_plugins` (listed there, the module is
imported before any test module and keeps pytest's assertion rewriting); `serve_standins(db_url, ...)`
serves other options. Both always shut the server down, even when the test fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn

from tests.support.http import TLS, PromptServer, started, stopped
from ticketiq.settings import Settings
from ticketiq.standins.app import StandinOptions, create_app
from ticketiq.standins.server import IDLE_S, listen, settings_env


@dataclass
class Standins:
    base_url: str
    # The settings that point an app process at these stand-ins (TICKETIQ_DATABASE_URL included).
    settings_env: dict[str, str]
    admin: httpx.AsyncClient

    @property
    def mcp_url(self) -> str:
        """The stand-in MCP server's Streamable HTTP endpoint (vendors/mcp_endpoint.py)."""
        return f"{self.base_url}/mcp"

    async def mcp_forget(self) -> None:
        """Every MCP session ends: a request with an old Mcp-Session-Id gets 404."""
        (await self.admin.post("/_standin/mcp/forget")).raise_for_status()

    async def mcp_extra_tool(self, enabled: bool) -> dict[str, Any]:
        """Adds (or removes) archive_note and sends notifications/tools/list_changed to the sessions."""
        response = await self.admin.post("/_standin/mcp/extra-tool", json={"enabled": enabled})
        response.raise_for_status()
        shown: dict[str, Any] = response.json()
        return shown

    def settings(self, **overrides: Any) -> Settings:
        return Settings.from_env(self.settings_env, **overrides)

    async def writes(self, **filters: str) -> list[dict[str, Any]]:
        """Writes the vendors received, oldest first; filters: vendor, operation, target, key, effect."""
        response = await self.admin.get("/_standin/writes", params=filters)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()
        return rows

    async def fault(self, vendor: str, mode: str, **fields: Any) -> None:
        """Arrange a fault: mode 429, 500, stall, hold or 500_after_apply; fields count, retry_after_s,
        stall_s, operation."""
        response = await self.admin.post("/_standin/faults", json={"vendor": vendor, "mode": mode, **fields})
        response.raise_for_status()

    async def jira_project(self, key: str, count: int) -> dict[str, Any]:
        """Fill the Jira project `key` with generated issues KEY-1..KEY-count (text and a topic label)."""
        response = await self.admin.post(f"/_standin/jira/projects/{key}/generate", json={"count": count})
        response.raise_for_status()
        made: dict[str, Any] = response.json()
        return made

    async def token_grants(self) -> list[dict[str, Any]]:
        """Every client-credentials request the token endpoint took, oldest first, with the token it granted."""
        response = await self.admin.get("/_standin/botframework/oauth/grants")
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()
        return rows

    async def expire_tokens(self) -> int:
        """Every token the token endpoint granted runs out now; returns how many did."""
        response = await self.admin.post("/_standin/botframework/oauth/expire")
        response.raise_for_status()
        return int(response.json()["expired"])

    async def clear_faults(self) -> None:
        (await self.admin.delete("/_standin/faults")).raise_for_status()

    async def options(self, **changes: Any) -> dict[str, Any]:
        response = await self.admin.post("/_standin/options", json=changes)
        response.raise_for_status()
        shown: dict[str, Any] = response.json()
        return shown


@contextlib.asynccontextmanager
async def serve_standins(
    db_url: str,
    *,
    model_latency_ms: int = 0,
    position_ids: bool = False,
    options: StandinOptions | None = None,
) -> AsyncIterator[Standins]:
    app = create_app(db_url, model_latency_ms=model_latency_ms, position_ids=position_ids, options=options)
    sock = listen(0)
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        app, log_config=None, access_log=False, ws="none", lifespan="on", timeout_graceful_shutdown=5,
        timeout_keep_alive=IDLE_S,
    )  # fmt: skip
    server = PromptServer(config)
    try:
        task = await started(server, sock)
    except BaseException:
        sock.close()
        raise
    try:
        async with httpx.AsyncClient(verify=TLS, base_url=base_url, timeout=30) as admin:
            yield Standins(base_url, settings_env(base_url, db_url), admin)
    finally:
        await stopped(server, task)
        sock.close()


@pytest.fixture
async def standins(db_url: str) -> AsyncIterator[Standins]:
    async with serve_standins(db_url) as running:
        yield running
