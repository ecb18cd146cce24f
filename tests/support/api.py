"""What a client of the HTTP API does in several tests, written once."""

from __future__ import annotations

import asyncio

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
