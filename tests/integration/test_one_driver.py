"""One driver per run per process: a process never drives a run twice at once, never claims back the
runs it still drives, and admits no run while it comes back under a new identity."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import psycopg

from tests.support.crash import eventually, run_row
from tests.support.engine import Probe, engine_under_test, read_rows
from ticketiq.leader.sweep import Sweeper

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write"]}


async def ended(db_url: str, run_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
    async def check() -> bool:
        return (await run_row(db_url, run_id))["status"] in ("succeeded", "failed")

    await eventually(check, timeout_s)
    return await run_row(db_url, run_id)


async def test_a_process_never_claims_back_a_run_it_still_drives(db_url: str, tmp_path: Path) -> None:
    probe = Probe(hold=asyncio.Event())
    async with engine_under_test(db_url, tmp_path, {"r": [READ, WRITE, DONE]}, {"r": TOOLS}, probe=probe,
                                 lead=False) as h:  # fmt: skip
        run_id = await h.run("r")
        assert await h.engine.start(run_id)
        while not probe.received:
            await asyncio.sleep(0.01)
        # Its lease lapses while its driver lives (a renewal that came too late): its own sweep must not
        # take the run from under its driver.
        await read_rows(db_url, "UPDATE leases SET expires_at = now() - interval '1 s' WHERE name = %s",
                        f"checkpoint:{run_id}")  # fmt: skip
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 0
        assert probe.hold is not None
        probe.hold.set()
        row = await ended(db_url, run_id)
    assert row == {"status": "succeeded", "attempt": 1, "losses": 0}
    assert len(probe.writes()) == 1


async def test_after_its_liveness_drops_a_process_claims_its_runs_back_once_and_drives_each_once(
    db_url: str, tmp_path: Path
) -> None:
    # A short lease, so that a lease dropped from renewal by a stale driver would lapse within the run.
    async with engine_under_test(db_url, tmp_path, {"r": [READ, WRITE, READ, DONE]}, {"r": TOOLS}, latency_ms=1500,
                                 liveness_poll_s=0.1, lease_ttl_s=3.0, lease_renew_s=0.5,
                                 lease_margin_s=0.5) as h:  # fmt: skip
        run_id = await h.run("r")
        assert await h.engine.start(run_id)
        await eventually(lambda: _step_at_least(db_url, run_id, 1))
        old = h.engine.deps.holder
        assert h.process.liveness._conn is not None
        await read_rows(db_url, "SELECT pg_terminate_backend(%s)", h.process.liveness._conn.info.backend_pid)
        row = await ended(db_url, run_id, 60)
        # Its mark was free and no one had found it dead: it took the mark again, the same identity (leader.retake).
        assert h.engine.deps.holder == old
    assert row["status"] == "succeeded"
    assert row["losses"] == 1  # given up when the mark went, claimed back once
    resumed = await read_rows(
        db_url, "SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    assert len(resumed) == 1
    assert len(h.probe.writes()) == 1


async def _step_at_least(db_url: str, run_id: str, step: int) -> bool:
    rows = await read_rows(db_url, "SELECT step FROM checkpoints WHERE run_id = %s", run_id)
    return bool(rows) and int(rows[0]["step"]) >= step


async def test_a_run_started_while_the_process_comes_back_under_a_new_identity_is_not_lost(
    db_url: str, tmp_path: Path
) -> None:
    scripts = {"r": [READ, READ, DONE]}
    (tmp_path / "victim").mkdir()
    (tmp_path / "leader").mkdir()
    common: dict[str, Any] = {"liveness_poll_s": 0.1, "latency_ms": 1000}
    async with (
        engine_under_test(db_url, tmp_path / "victim", scripts, {"r": TOOLS}, lead=False, **common) as victim,
        engine_under_test(db_url, tmp_path / "leader", scripts, {"r": TOOLS}, lead=True, **common),
    ):
        run_id = await victim.run("r")
        # Hold back the victim's new liveness mark (its registration waits on this lock) so the run is
        # started while the process has lost its old mark and not yet taken a new one.
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=False) as locker:
            await locker.execute("LOCK TABLE processes IN EXCLUSIVE MODE")
            assert victim.process.liveness._conn is not None
            await read_rows(db_url, "SELECT pg_terminate_backend(%s)", victim.process.liveness._conn.info.backend_pid)
            deadline = time.monotonic() + 10
            while victim.process.liveness._conn is not None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # the loss was seen: the old mark's connection is closed
            starting = asyncio.create_task(victim.engine.start(run_id))
            await asyncio.sleep(1.0)
            await locker.rollback()
        await starting
        row = await ended(db_url, run_id)
    assert row["status"] == "succeeded"
    assert row["losses"] == 0  # not taken over the moment it started
