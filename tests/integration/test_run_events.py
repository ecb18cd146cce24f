"""GET /v1/runs/{id}/events over a real socket: Server-Sent Events of the run's status changes and its
timeline's new or changed attempts and steps, ending with `end` once the run ended; the rights of
GET /v1/runs/{id}."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.crash import reaches
from tests.support.engine import engine_under_test, read_rows
from tests.support.http import TLS, serving
from ticketiq.entries.api import create_app

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
AGENTS = {"t": {"tools": ["probe_read", "probe_keyed"]}}


async def events_of(lines: AsyncIterator[str], seen: list[tuple[str, dict[str, Any]]], until: str) -> None:
    """Read events into `seen` until one named `until` came (or the stream ended)."""
    event: str | None = None
    async for line in lines:
        if line.startswith("event:"):
            event = line.removeprefix("event:").strip()
        elif line.startswith("data:") and event is not None:
            seen.append((event, json.loads(line.removeprefix("data:").strip())))
            if event == until:
                return
            event = None


async def test_the_events_show_the_status_change_and_the_timeline_and_end_when_the_run_ends(
    db_url: str, tmp_path: Path
) -> None:
    scripts = {"t": [READ, KEYED, DONE]}
    async with engine_under_test(db_url, tmp_path, scripts, AGENTS, approval=["probe_keyed"], lead=False) as h:
        alice = await h.token("alice", "caller", ["t"])
        bob = await h.token("bob", "caller", ["t"])
        ops = await h.token("ops", "operator")
        async with (
            serving(create_app(h.settings, h.process)) as base,
            httpx.AsyncClient(
                verify=TLS, base_url=base, timeout=30, headers={"Authorization": f"Bearer {alice}"}
            ) as client,
        ):
            run_id = (await client.post("/v1/runs", json={"agent": "t", "input": "Look at OPS-9"})).json()["id"]
            await reaches(db_url, run_id, "waiting")
            refused = await client.get(f"/v1/runs/{run_id}/events", headers={"Authorization": f"Bearer {bob}"})
            seen: list[tuple[str, dict[str, Any]]] = []
            async with client.stream("GET", f"/v1/runs/{run_id}/events") as stream:
                assert stream.status_code == 200
                assert stream.headers["content-type"].startswith("text/event-stream")
                lines = stream.aiter_lines()
                async with asyncio.timeout(30):
                    while not any(e == "step" and d["step"] == 2 for e, d in seen):  # what it shows now
                        await events_of(lines, seen, until="step")
                    shown = len(seen)
                    approval = (await read_rows(db_url, "SELECT id::text AS id FROM approvals WHERE run_id = %s",
                                                run_id))[0]["id"]  # fmt: skip
                    decided = await client.post(f"/v1/approvals/{approval}", json={"decision": "approve"},
                                                headers={"Authorization": f"Bearer {ops}"})  # fmt: skip
                    assert decided.status_code == 200
                    await events_of(lines, seen, until="end")
                    rest = [line async for line in lines if line.strip()]

    assert refused.status_code == 404  # another caller's run: the rights of GET /v1/runs/{id}
    before, after = seen[:shown], seen[shown:]
    assert before[0] == ("status", {"id": run_id, "status": "waiting", "attempt": 1})
    assert ("attempt", 1, "waiting") in [(e, d["attempt"], d["ended"]) for e, d in before if e == "attempt"]
    held = next(d for e, d in before if e == "step" and d["step"] == 2)
    assert held["calls"][0]["outcome"] == "held" and held["calls"][0]["approval_id"] == approval
    # After the decision: the run's status changes, the held step is sent again changed, then the end.
    statuses = [d["status"] for e, d in after if e == "status"]
    assert statuses[-1] == "succeeded"
    changed = [d for e, d in after if e == "step" and d["step"] == 2]
    assert changed and changed[-1]["calls"][0]["outcome"] == "ok" and changed[-1]["ended_at"] is not None
    assert ("attempt", 2, "finished") in [(e, d["attempt"], d["ended"]) for e, d in after if e == "attempt"]
    assert after[-1] == ("end", {"id": run_id, "status": "succeeded"})
    assert rest == []  # the stream closed after `end`


async def test_a_follower_is_woken_by_its_runs_status_change_heard_on_the_gate_watchs_connection(
    db_url: str, tmp_path: Path
) -> None:
    """The runs' status notifications come in on the process's one listening connection (the gate watch's):
    a follower of a run is woken by the run's change, not by its recheck (`Follower.wait` would time out
    without setting the event). The run events count the watch's LISTENs as their own."""
    scripts = {"t": [READ, KEYED, DONE]}
    async with engine_under_test(db_url, tmp_path, scripts, AGENTS, approval=["probe_keyed"], lead=False) as h:
        events, watch = h.process.views.events, h.engine.deps.gate_watch
        assert events is not None
        async with asyncio.timeout(30):
            while not events.connected:
                await asyncio.sleep(0.02)
        assert (events.listens, watch.listens) == (1, 1)
        run_id = await h.run("t", "Look at OPS-9")
        with events.following(run_id) as follower:
            assert await h.engine.start(run_id)
            async with asyncio.timeout(30):
                await follower.event.wait()  # set only by a notification (or the listener coming or going)
        await reaches(db_url, run_id, "waiting")
        assert (events.listens, watch.listens, events.connected) == (1, 1, True)  # no reconnect woke it
