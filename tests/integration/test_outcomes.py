"""Audits say what happened (I8), a known outcome is kept, a failure is fenced, and a run fenced off in
the middle of a step with several calls stops quietly."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.crash import HeldCall, kill_driver, lapse
from tests.support.engine import Probe, engine_under_test, read_rows
from ticketiq.engine.driver import RunDriver
from ticketiq.leader.sweep import Sweeper

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
READ_THEN_WRITE: dict[str, Any] = {
    "calls": [
        {"tool": "probe_read", "arguments": {"note": "{jira_key}"}},
        {"tool": "probe_write", "arguments": {"note": "{jira_key}"}},
    ]
}
READ_AND_TWO_WRITES: dict[str, Any] = {
    "calls": [
        {"tool": "probe_read", "arguments": {"note": "a"}},
        {"tool": "probe_write", "arguments": {"note": "b"}},
        {"tool": "probe_write", "arguments": {"note": "c"}},
    ]
}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write", "probe_keyed"]}


async def test_the_resume_audit_says_per_call_what_happened_not_what_was_planned(db_url: str, tmp_path: Path) -> None:
    # The process dies while the step's read is at the vendor and before its write was marked; the
    # write's tool is then revoked. The read is made again; the write is refused, not "made".
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"m": [READ_THEN_WRITE, DONE]}, {"m": TOOLS}, probe=held.probe,
                                 lead=False, call_concurrency=1) as h:  # fmt: skip
        run_id = await h.run("m")
        assert await h.engine.start(run_id)
        await held.at_vendor()
        await kill_driver(h.engine, run_id)
        held.released.set()
        await read_rows(db_url, "UPDATE grants SET revoked = true WHERE tool = 'probe_write'")
        await lapse(db_url, run_id)
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
    [resumed] = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    assert resumed["detail"]["calls"] == [
        {"idx": 0, "tool": "probe_read", "class": "read", "route": "made", "happened": "made"},
        {"idx": 1, "tool": "probe_write", "class": "write", "route": "made", "happened": "refused"},
    ]
    assert held.probe.writes() == []


async def test_an_outcome_that_comes_back_after_the_lease_deadline_is_still_recorded(
    db_url: str, tmp_path: Path
) -> None:
    # TTL 4 s, margin 2 s, no renewal: the deadline is 2 s after the run was taken. The write is sent
    # at once and its vendor answers after 3 s: the answer is known and kept (nobody took the run
    # over); only what comes after it is not sent. (With a 1 s deadline a loaded machine sometimes
    # reached the first send after it.)
    probe = Probe()

    async def slow(record: dict[str, Any]) -> None:
        if record["kind"] == "write":
            await asyncio.sleep(3.0)

    probe.on_receive = slow
    async with engine_under_test(db_url, tmp_path, {"w": [WRITE, WRITE, DONE]}, {"w": TOOLS}, probe=probe,
                                 lead=False, lease_ttl_s=4.0, lease_margin_s=2.0, lease_renew_s=600) as h:  # fmt: skip
        run_id = await h.run("w")
        assert await h.engine.start(run_id)
        status = await asyncio.wait_for(h.engine.tasks[run_id], 30)
    assert status == "lost"  # it stopped before its next step: the deadline had passed
    rows = await read_rows(db_url, "SELECT step, status, outcome FROM calls WHERE run_id = %s ORDER BY step", run_id)
    assert [(r["step"], r["status"]) for r in rows] == [(1, "done")]
    assert rows[0]["outcome"]["result"]["ok"] is True
    assert len(probe.writes()) == 1


async def test_a_failure_is_fenced_by_the_attempt(db_url: str, tmp_path: Path) -> None:
    # A process that cannot verify a checkpoint must not fail a run another attempt now drives.
    async with engine_under_test(db_url, tmp_path, {"r": [READ, DONE]}, {"r": TOOLS}, lead=False) as h:
        run_id = await h.run("r")
        await read_rows(db_url, "UPDATE checkpoints SET seal = 'forged' WHERE run_id = %s", run_id)
        store = h.engine.deps.store
        taken = await store.acquire(run_id, h.engine.deps.holder, 8.0)
        assert taken is not None
        # Another process takes the run over before this attempt acts on its checkpoint.
        await read_rows(db_url, "UPDATE checkpoints SET attempt = attempt + 1 WHERE run_id = %s", run_id)
        lease = h.engine.deps.keeper.hold(run_id, time.monotonic(), taken.attempt)
        status = await RunDriver(h.engine.deps, taken, lease).drive()
        h.engine.deps.keeper.drop(lease)
    assert status == "lost"
    rows = await read_rows(db_url, "SELECT status, error FROM runs WHERE id = %s", run_id)
    assert rows == [{"status": "running", "error": None}]  # left to the attempt that drives it


async def test_a_run_fenced_off_during_a_step_of_several_calls_stops_quietly(
    db_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The step's calls run in a TaskGroup (one at a time here): the read is held at the vendor while
    # another process takes the run over; the first write's in-doubt mark then matches nothing.
    probe = Probe(hold=asyncio.Event())
    async with engine_under_test(db_url, tmp_path, {"t": [READ_AND_TWO_WRITES, DONE]}, {"t": TOOLS}, probe=probe,
                                 lead=False, call_concurrency=1) as h:  # fmt: skip
        run_id = await h.run("t")
        assert await h.engine.start(run_id)
        task = h.engine.tasks[run_id]
        while not probe.received:
            await asyncio.sleep(0.01)
        await read_rows(db_url, "UPDATE checkpoints SET attempt = attempt + 1 WHERE run_id = %s", run_id)
        with caplog.at_level(logging.INFO):
            assert probe.hold is not None
            probe.hold.set()
            status = await asyncio.wait_for(task, 30)
    assert status == "lost"
    assert probe.writes() == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []  # not a driver crash: a quiet stop
    assert any("stops" in r.getMessage() and "fenced off" in r.getMessage() for r in caplog.records)
