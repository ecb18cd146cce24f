"""What a client of the HTTP API does in several tests, written once."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx


async def waiting_approval(client: httpx.AsyncClient, headers: dict[str, str], text: str) -> str:
    """An approval a run of agent `a` filed and now waits on."""
    run_id = (await client.post("/v1/runs", json={"agent": "a", "input": text}, headers=headers)).json()["id"]
    for _ in range(600):
        pending = [a for a in (await client.get("/v1/approvals", headers=headers)).json()["approvals"]
                   if a["run_id"] == run_id]  # fmt: skip
        if pending:
            return str(pending[0]["id"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} filed no approval")


async def until(client: httpx.AsyncClient, run_id: str, *statuses: str) -> dict[str, Any]:
    """The run as `GET /v1/runs/{id}` shows it, once it is in one of `statuses` (within about 30 s)."""
    run: dict[str, Any] = {}
    for _ in range(600):
        run = (await client.get(f"/v1/runs/{run_id}")).json()
        if run["status"] in statuses:
            return run
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run_id} never reached {statuses}: {run}")
