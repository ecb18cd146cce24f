"""A process whose run is taken over underneath it sends nothing more and writes nothing more (I3), in
the engine itself on real Postgres and real sockets: the read-only step's checkpoint, the in-doubt mark
of a write, the outcome of a write sent, and the filing of an approval, each with another process's
take committed before it, or held open in another transaction while the statement runs (the statement
waits for it and then sees the new attempt). What reached the vendor is judged from the probe's record
of every request it received.

The lease is long and never renewed here (no renewal drops the taken lease from under the driver), and
this process does not lead: only the fence can stop the run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.crash import HeldCall
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.fence_rig import held_takeover, taken_over, written_now

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
READ_THEN_WRITE: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "a"}},
                                             {"tool": "probe_write", "arguments": {"note": "b"}}]}  # fmt: skip
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write"]}
QUIET: dict[str, Any] = {"lead": False, "lease_ttl_s": 120.0, "lease_renew_s": 600.0, "call_concurrency": 1}


async def driving(h: Harness, agent: str) -> tuple[str, asyncio.Task[Any]]:
    run_id = await h.run(agent)
    assert await h.engine.start(run_id)
    return run_id, h.engine.tasks[run_id]


@dataclass(frozen=True)
class Taken:
    rows: dict[str, Any]  # the run's rows as the take left them
    received: int  # requests the vendor had received when the take committed


async def lost_to_a_held_take(db_url: str, held: HeldCall, run_id: str, task: asyncio.Task[Any], what: str) -> Taken:
    """Another process takes the run and holds its take open; the call held at the vendor returns, and
    the driver's next statement (`what`) must wait on the take; the take commits; the driver stops."""
    async with held_takeover(db_url, run_id) as takeover:
        rows = await takeover.take()
        held.released.set()
        await takeover.waited_on_by(task, what)
        await takeover.commit()
        received = len(held.probe.received)
    assert await asyncio.wait_for(task, 30) == "lost"
    return Taken(rows, received)


async def lost_to_a_raised_attempt(db_url: str, held: HeldCall, run_id: str, task: asyncio.Task[Any]) -> dict[str, Any]:
    """Another process's take commits while the call is held at the vendor; the call returns and the
    driver stops. The run's rows as the take left them."""
    await taken_over(db_url, run_id)
    before = await written_now(db_url, run_id)
    held.released.set()
    assert await asyncio.wait_for(task, 30) == "lost"
    return before


async def test_a_read_only_step_whose_checkpoint_waits_on_a_takeover_makes_no_more_calls(
    db_url: str, tmp_path: Path
) -> None:
    # Step 1's read is held at the vendor while another process takes the run and holds its take open;
    # the read returns, the model asks step 2 (a read), and step 2's checkpoint (the read-only step's one
    # statement) waits on the take. The take commits: the checkpoint matches nothing, step 2's read is
    # never sent, nothing is written after the take.
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"r": [READ, READ, DONE]}, {"r": TOOLS}, probe=held.probe,
                                 **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "r")
        await held.at_vendor()
        taken = await lost_to_a_held_take(db_url, held, run_id, task, "step 2's checkpoint")
    assert [r["kind"] for r in held.probe.received] == ["read"]
    assert await written_now(db_url, run_id) == taken.rows


async def test_a_read_only_step_under_a_raised_attempt_makes_no_call(db_url: str, tmp_path: Path) -> None:
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"r": [READ, READ, DONE]}, {"r": TOOLS}, probe=held.probe,
                                 **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "r")
        await held.at_vendor()
        before = await lost_to_a_raised_attempt(db_url, held, run_id, task)
    assert [r["kind"] for r in held.probe.received] == ["read"]
    assert await written_now(db_url, run_id) == before


async def test_a_zombie_whose_mark_waits_on_a_takeover_sends_no_write(db_url: str, tmp_path: Path) -> None:
    # One step, a read then a write, made one at a time. The read is held at the vendor while another
    # process takes the run and holds its take open; the read returns and the write's in-doubt mark runs
    # (I2): it must wait for the take (FOR SHARE) and then see the new attempt. A mark that read its fence
    # from before the take would commit and send the write after the takeover committed (I3 broken).
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"z": [READ_THEN_WRITE, DONE]}, {"z": TOOLS}, probe=held.probe,
                                 **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "z")
        await held.at_vendor()
        taken = await lost_to_a_held_take(db_url, held, run_id, task, "the write's in-doubt mark")
    assert held.probe.writes() == []
    assert held.probe.received[taken.received :] == []  # nothing at all after the takeover committed
    assert await written_now(db_url, run_id) == taken.rows
    assert await read_rows(db_url, "SELECT 1 FROM calls WHERE run_id = %s", run_id) == []


async def test_a_write_whose_outcome_comes_back_after_a_takeover_records_nothing(db_url: str, tmp_path: Path) -> None:
    # The write is at the vendor when another process takes the run: its answer comes back, and its
    # outcome (one statement, I2) is not recorded under the lost attempt. The call stays in doubt for the
    # new attempt to settle; nothing more is sent.
    held = HeldCall("write")
    async with engine_under_test(db_url, tmp_path, {"w": [WRITE, READ, DONE]}, {"w": TOOLS}, probe=held.probe,
                                 **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "w")
        await held.at_vendor()
        before = await lost_to_a_raised_attempt(db_url, held, run_id, task)
        assert [c["status"] for c in before["calls"]] == ["in_doubt"]
    assert [r["kind"] for r in held.probe.received] == ["write"]
    assert await written_now(db_url, run_id) == before


async def test_a_write_whose_outcome_waits_on_a_takeover_records_nothing(db_url: str, tmp_path: Path) -> None:
    held = HeldCall("write")
    async with engine_under_test(db_url, tmp_path, {"w": [WRITE, READ, DONE]}, {"w": TOOLS}, probe=held.probe,
                                 **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "w")
        await held.at_vendor()
        taken = await lost_to_a_held_take(db_url, held, run_id, task, "the write's outcome")
    assert [r["kind"] for r in held.probe.received] == ["write"]
    assert await written_now(db_url, run_id) == taken.rows
    assert [c["status"] for c in taken.rows["calls"]] == ["in_doubt"]


async def test_an_approval_filed_while_a_takeover_commits_is_not_filed_and_nothing_is_sent(
    db_url: str, tmp_path: Path
) -> None:
    # The step's read is held while another process takes the run and holds its take open; then the
    # write, which needs approval, is routed to the queue (I15): the filing waits for the take and files
    # nothing. No request for a person's decision is left behind by an attempt that no longer drives.
    held = HeldCall("read")
    async with engine_under_test(db_url, tmp_path, {"a": [READ_THEN_WRITE, DONE]}, {"a": TOOLS}, probe=held.probe,
                                 approval=["probe_write"], **QUIET) as h:  # fmt: skip
        run_id, task = await driving(h, "a")
        await held.at_vendor()
        taken = await lost_to_a_held_take(db_url, held, run_id, task, "the approval's filing")
    assert held.probe.writes() == []
    assert await written_now(db_url, run_id) == taken.rows
    assert taken.rows["approvals"] == []
