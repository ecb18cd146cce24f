"""Resume rules that need a precise crash: an approval filed just before the process died, and a
process whose liveness connection drops."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.crash import HeldCall, kill_driver, lapse
from tests.support.engine import Probe, engine_under_test, read_rows
from ticketiq.engine.step_keys import approval_key
from ticketiq.leader.sweep import Sweeper

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
WRITE: dict[str, Any] = {"calls": [{"tool": "probe_write", "arguments": {"note": "{jira_key}"}}]}
DONE: dict[str, Any] = {"text": "done with {jira_key}"}
TOOLS = {"tools": ["probe_read", "probe_write"]}


async def crash_while_waiting(db_url: str, run_id: str) -> None:
    """As if the process died after filing the approval and before it suspended the run: the run is
    still running and its lease, held by a dead process, has lapsed."""
    await read_rows(db_url, "UPDATE runs SET status = 'running' WHERE id = %s", run_id)
    await read_rows(
        db_url,
        "INSERT INTO leases (name, holder, expires_at) VALUES ('checkpoint:' || %s, 'dead', now() - interval '1 s')",
        run_id,
    )


async def test_an_approval_decided_while_the_run_was_lost_is_used_not_filed_again(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False) as h:  # fmt: skip
        run = await h.finish(await h.run("a"))
        assert run["status"] == "waiting"
        run_id = str(run["id"])
        await crash_while_waiting(db_url, run_id)
        approval = (await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", run_id))[0]["id"]
        await read_rows(db_url, "UPDATE approvals SET status = 'approved', decided_by = 'bob' WHERE id = %s", approval)
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
    assert [w["key"] for w in h.probe.writes()] == [approval_key(str(approval))]
    assert len(await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", run_id)) == 1
    audit = await read_rows(
        db_url,
        "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'",
        run_id,
    )
    assert audit[0]["detail"]["calls"] == [
        {"idx": 0, "tool": "probe_write", "class": "write", "route": "approval_decided", "happened": "approval_decided"}
    ]


async def test_a_write_still_held_for_approval_is_coalesced_with_the_waiting_request(
    db_url: str, tmp_path: Path
) -> None:
    async with engine_under_test(db_url, tmp_path, {"a": [WRITE, DONE]}, {"a": TOOLS}, approval=["probe_write"],
                                 lead=False) as h:  # fmt: skip
        run_id = str((await h.finish(await h.run("a")))["id"])
        await crash_while_waiting(db_url, run_id)
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "waiting"
    assert h.probe.writes() == []
    assert len(await read_rows(db_url, "SELECT id FROM approvals WHERE run_id = %s", run_id)) == 1


async def test_a_process_whose_liveness_connection_drops_sends_nothing_more(db_url: str, tmp_path: Path) -> None:
    probe = Probe(hold=asyncio.Event())
    async with engine_under_test(db_url, tmp_path, {"l": [READ, WRITE, DONE]}, {"l": TOOLS}, probe=probe,
                                 lead=False) as h:  # fmt: skip
        run_id = await h.run("l")
        assert await h.engine.start(run_id)
        task = h.engine.tasks[run_id]
        while not probe.received:
            await asyncio.sleep(0.01)
        old_holder = h.engine.deps.holder
        liveness = h.process.liveness
        assert liveness._conn is not None
        backend = liveness._conn.info.backend_pid
        await read_rows(db_url, "SELECT pg_terminate_backend(%s)", backend)
        status = await asyncio.wait_for(task, 30)  # lost at once, before the write it was about to send
        assert probe.hold is not None
        probe.hold.set()
        deadline = time.monotonic() + 10
        while not h.engine.admitted.is_set() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # No leader found it dead meanwhile: it took its mark again under the same identity, and gave up
        # the run's lease in that statement (made lapsed, for the sweep to claim under a new attempt).
        assert h.engine.admitted.is_set() and h.engine.deps.holder == old_holder
        lease = await read_rows(db_url, "SELECT holder, expires_at < now() AS lapsed FROM leases WHERE name = %s",
                                f"checkpoint:{run_id}")  # fmt: skip
    assert status == "lost"
    assert probe.writes() == []
    assert lease == [{"holder": old_holder, "lapsed": True}]
    alive = await read_rows(db_url, "SELECT process_alive(%s) AS alive", old_holder)
    assert alive == [{"alive": False}]  # the harness stopped it: its mark went with it


@pytest.mark.long
async def test_a_call_marked_as_a_write_stays_a_write_when_its_tool_is_now_classed_a_read(
    db_url: str, tmp_path: Path
) -> None:
    from dataclasses import replace

    from ticketiq.tools.base import ToolClass

    probe = Probe()
    probe_writes_held = asyncio.Event()
    released = asyncio.Event()

    async def hold_the_write(record: dict[str, Any]) -> None:
        if record["kind"] == "write":
            probe_writes_held.set()
            await released.wait()  # the process "dies" with the write in flight

    probe.on_receive = hold_the_write
    async with engine_under_test(db_url, tmp_path, {"w": [WRITE, DONE]}, {"w": TOOLS}, probe=probe, lead=False) as h:
        run_id = await h.run("w")
        assert await h.engine.start(run_id)
        await asyncio.wait_for(probe_writes_held.wait(), 30)
        h.engine.tasks[run_id].cancel()  # the driver is gone; the call stays in doubt
        await asyncio.sleep(0.1)
        await read_rows(
            db_url, "UPDATE leases SET expires_at = now() - interval '1 s', holder = 'dead' WHERE name = %s",
            f"checkpoint:{run_id}",
        )  # fmt: skip
        registry = h.engine.deps.registry
        registry.tools["probe_write"] = replace(registry.tools["probe_write"], tool_class=ToolClass.READ)
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
        released.set()
    # I10: settled as the write it was marked, never made again as a read.
    assert len(probe.writes()) + len([r for r in probe.received if r["kind"] == "read"]) == 1
    rows = await read_rows(db_url, "SELECT class, settlement FROM calls WHERE run_id = %s", run_id)
    assert rows == [{"class": "write", "settlement": "unknown_not_sent"}]


async def test_asking_again_by_delegation_key_takes_over_a_lapsed_child_once(db_url: str, tmp_path: Path) -> None:
    from ticketiq.engine.delegation import delegation_tool

    agents = {"child": TOOLS}
    async with engine_under_test(db_url, tmp_path, {"child": [READ, DONE]}, agents, lead=False) as h:
        child_agent = h.engine.deps.catalog.get("child")
        assert child_agent is not None
        # A child its process started and lost: running, its lease lapsed, no sweep to take it.
        created = await h.engine.create_run(child_agent, "look at OPS-9", delegation_key="tqdelegationkey0000000000")
        assert await h.engine.start(created.id)
        await asyncio.wait_for(h.engine.tasks[created.id], 30)
        await read_rows(db_url, "UPDATE runs SET status = 'running', answer = NULL WHERE id = %s", created.id)
        await read_rows(
            db_url,
            "INSERT INTO leases (name, holder, expires_at) "
            "VALUES ('checkpoint:' || %s, 'dead', now() - interval '1 s')",
            created.id,
        )
        parent = await h.engine.create_run(child_agent, "the parent")
        tool = delegation_tool(h.engine)
        from ticketiq.tools.base import CallContext

        outcome = await tool.executor(
            CallContext(
                run_id=parent.id, tool=tool.name, args={"agent": "child", "input": "look at OPS-9"},
                key="tqdelegationkey0000000000", http=h.engine.deps.http, settings=h.settings,
            )
        )  # fmt: skip
    assert outcome.ok, outcome
    assert outcome.result["run_id"] == created.id  # the same child, found by its key
    children = await read_rows(db_url, "SELECT id::text AS id, status FROM runs WHERE delegation_key IS NOT NULL")
    assert children == [{"id": created.id, "status": "succeeded"}]
    lease = await read_rows(db_url, "SELECT losses FROM checkpoints WHERE run_id = %s", created.id)
    assert lease == [{"losses": 1}]  # taken over once


KEYED: dict[str, Any] = {"calls": [{"tool": "probe_keyed", "arguments": {"note": "{jira_key}"}}]}


@pytest.mark.parametrize("position_ids", [False, True])
async def test_a_keyed_write_in_doubt_is_resent_only_under_a_derived_key(
    db_url: str, tmp_path: Path, position_ids: bool
) -> None:
    """I9, I11: a keyed write whose vendor dedupes longer than a resume is sent again with its key only
    when that key was derived from the step. A provider id that is only a position (`call_0`) derives no
    key: the write went out with a fresh one and is settled as any other write (the probe's keyed tool
    has no reader, so: outcome unknown, not sent again)."""
    held = HeldCall("keyed")
    async with engine_under_test(db_url, tmp_path, {"k": [KEYED, DONE]}, {"k": {"tools": ["probe_keyed"]}},
                                 probe=held.probe, position_ids=position_ids, lead=False) as h:  # fmt: skip
        run_id = await h.run("k")
        assert await h.engine.start(run_id)
        await held.at_vendor()
        await kill_driver(h.engine, run_id)  # the process died with the write at the vendor
        await lapse(db_url, run_id)
        held.released.set()
        assert await Sweeper(h.engine, db_url).claim("lapsed") == 1
        assert await asyncio.wait_for(h.engine.tasks[run_id], 30) == "succeeded"
    resumed = await read_rows(
        db_url, "SELECT detail FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'", run_id
    )
    settled = [(c["route"], c["happened"]) for c in resumed[0]["detail"]["calls"]]
    keys = [w["key"] for w in h.probe.writes()]
    row = (await read_rows(db_url, "SELECT step_key, sent_key FROM calls WHERE run_id = %s", run_id))[0]
    if position_ids:
        assert row["step_key"] is None and row["sent_key"].startswith("tf")
        assert settled == [("unknown_not_sent", "unknown_not_sent")]
        assert keys == [row["sent_key"]]  # sent once, never again
    else:
        assert row["step_key"].startswith("tq")
        assert settled == [("resent_same_key", "resent_same_key")]
        assert keys == [row["step_key"], row["step_key"]]  # the vendor dedupes the second on the key
