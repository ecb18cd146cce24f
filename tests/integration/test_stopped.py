"""A run ended by Stop ends `stopped`, a terminal status of its own (not `failed`): a waiting run at once,
a running one at its next gate check. Its A2A task is canceled, the list's `status=stopped` finds it,
and a parent that delegated to it hears the child was stopped at once, not after its wait runs out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from a2a.types.a2a_pb2 import GetTaskRequest, TaskState

from tests.support.a2a_rig import A2A, message, send, text_of
from tests.support.api import until
from tests.support.engine import Probe, engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS: dict[str, list[dict[str, Any]]] = {
    "asker": [
        {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment?"}}]},
        {"text": "noted {jira_key}"},
    ],
    # Two steps of reads: a Stop that lands during the first is seen at the second step's gate check.
    "reader": [READ, READ, {"text": "read {jira_key} twice"}],
    "boss": [
        {"calls": [{"tool": "delegate_to_agent", "arguments": {"agent": "asker", "input": "{input}"}}]},
        {"text": "child: {result:delegate_to_agent.error|no error}"},
    ],
}
AGENTS: dict[str, dict[str, Any]] = {
    "asker": {"tools": [], "description": "Asks first."},
    "reader": {"tools": ["probe_read"], "description": "Reads twice."},
    "boss": {"tools": ["delegate_to_agent"], "description": "Delegates."},
}


@asynccontextmanager
async def stopping(db_url: str, tmp: Path, probe: Probe | None = None) -> AsyncIterator[tuple[A2A, httpx.AsyncClient]]:
    # A delegating call would wait ten minutes for a child that never ends: the test sees it end at once.
    async with engine_under_test(db_url, tmp, SCRIPTS, AGENTS, probe=probe, delegation_wait_s=600.0) as h:
        token = await h.token("ops", "operator")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {token}"}
            ) as client,
        ):
            yield A2A(h, base, token), client


async def listed(client: httpx.AsyncClient, **params: Any) -> list[str]:
    return [r["id"] for r in (await client.get("/v1/runs", params=params)).json()["runs"]]


async def test_a_stopped_waiting_run_ends_stopped_and_its_task_is_canceled(db_url: str, tmp_path: Path) -> None:
    async with stopping(db_url, tmp_path) as (s, client), s.client() as a2a:
        waiting = await send(a2a, message("Note OPS-31", "m-31", agent="asker"))
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        stopped = await client.post(f"/v1/runs/{waiting.id}/stop")
        assert (stopped.status_code, stopped.json()["status"]) == (202, "stopped")
        run = (await client.get(f"/v1/runs/{waiting.id}")).json()
        assert (run["status"], run["error"], run["waiting_for"]) == ("stopped", "stopped by ops", None)
        assert run["finished_at"] is not None
        task = await a2a.get_task(GetTaskRequest(id=waiting.id))
        assert task.status.state == TaskState.TASK_STATE_CANCELED and text_of(task) == "stopped by ops"
        assert await listed(client, status="stopped") == [waiting.id]
        assert await listed(client, status="failed") == []
        assert (await s.h.process.views.run_counts(None))["stopped"] == 1
    audit = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s ORDER BY id", waiting.id)
    assert "agent.run.stop_requested" in [a["action"] for a in audit]


async def test_a_stopped_running_run_ends_stopped_at_its_next_step(db_url: str, tmp_path: Path) -> None:
    hold = asyncio.Event()
    probe = Probe(hold=hold)
    async with stopping(db_url, tmp_path, probe) as (s, client), s.client() as a2a:
        sending = asyncio.create_task(send(a2a, message("Read OPS-32", "m-32", agent="reader")))
        for _ in range(600):  # the first read is in flight, held by the probe
            if probe.in_flight:
                break
            await asyncio.sleep(0.05)
        run_id = str(probe.received[0]["run_id"])
        assert (await client.get(f"/v1/runs/{run_id}")).json()["status"] == "running"
        stopped = await client.post(f"/v1/runs/{run_id}/stop")
        assert (stopped.status_code, stopped.json()["status"]) == (202, "running")  # at its next gate check
        hold.set()
        run = await until(client, run_id, "stopped", "failed", "succeeded")
        task = await sending
        assert (run["status"], run["error"]) == ("stopped", "refused by the stop gate: the run was stopped by ops")
        assert task.status.state == TaskState.TASK_STATE_CANCELED
        assert await listed(client, status="stopped") == [run_id]
    assert len([r for r in probe.received if r["kind"] == "read"]) == 1  # the second step's read was not made
    ended = await read_rows(db_url, "SELECT action FROM audit_log WHERE run_id = %s AND action LIKE 'agent.run.%%ed'",
                            run_id)  # fmt: skip
    assert {"action": "agent.run.stopped"} in ended


async def test_a_parent_hears_at_once_that_the_child_it_delegated_to_was_stopped(db_url: str, tmp_path: Path) -> None:
    async with stopping(db_url, tmp_path) as (_, client):
        parent = (await client.post("/v1/runs", json={"agent": "boss", "input": "Note OPS-33"})).json()["id"]
        child: list[dict[str, Any]] = []
        for _ in range(600):
            child = await read_rows(db_url, "SELECT id::text, status FROM runs WHERE parent_run_id = %s", parent)
            if child and child[0]["status"] == "waiting":
                break
            await asyncio.sleep(0.05)
        child_id = child[0]["id"]
        assert (await client.post(f"/v1/runs/{child_id}/stop")).json()["status"] == "stopped"
        # The parent's call waits up to ten minutes for its child to end: `stopped` is an end.
        done = await until(client, parent, "succeeded", "failed", "stopped")
    assert done["status"] == "succeeded"
    assert done["answer"] == f"child: delegated run {child_id} is stopped: stopped by ops"
