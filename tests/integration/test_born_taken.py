"""A run born taken (`runs.create_taken`, issue 19): created and taken by its maker in one statement, so
what a take leaves must come out of that statement as `acquire` would leave it. Each test here guards one
part of it (tests/mutants/conditions.py declares the mutants they kill): the lease is live and its
maker's, so no sweep claims a run its maker drives (I5); the attempt's row names the maker; the creation
audit names the status a repeat of the request is answered with; a repeated key makes nothing (I9)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.support.crash import eventually
from tests.support.engine import Probe, engine_under_test, read_rows

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"a": [READ, {"text": "answered {jira_key}"}]}
AGENTS = {"a": {"tools": ["probe_read"]}}


async def test_a_run_born_taken_is_held_by_its_maker_and_no_sweep_claims_it(db_url: str, tmp_path: Path) -> None:
    probe = Probe(hold=asyncio.Event())
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, probe=probe, lead=False) as h:
        agent = h.engine.deps.catalog.get("a")
        assert agent is not None
        made = await h.engine.create_run(agent, "check OPS-31", take=True, idempotency_key="born-31")
        await eventually(lambda: _true(bool(probe.received)), what="the run's read, held")
        # Another process's sweep, as the leader runs it, finds no lapsed lease: the run's is live.
        claimed = await h.engine.store.claim_lapsed("vm:other:sweeper", 8.0, 100, [])
        assert made.id not in [c.run_id for c in claimed]
        lease = await read_rows(db_url, "SELECT holder, expires_at > now() + interval '4 seconds' AS live "
                                "FROM leases WHERE name = 'checkpoint:' || %s", made.id)  # fmt: skip
        assert lease == [{"holder": h.engine.deps.holder, "live": True}]
        assert probe.hold is not None
        probe.hold.set()
        assert await h.engine.tasks[made.id] == "succeeded"
    assert await read_rows(db_url, "SELECT attempt, losses FROM checkpoints WHERE run_id = %s", made.id) == [
        {"attempt": 1, "losses": 0}
    ]
    # Attempt 1's row names its maker, as a take's does (the run's timeline reads it).
    attempts = await read_rows(db_url, "SELECT attempt, process FROM run_attempts WHERE run_id = %s", made.id)
    assert attempts == [{"attempt": 1, "process": h.engine.deps.holder}]


async def test_a_repeated_key_makes_nothing_and_finds_the_run_born_with_its_status(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        agent = h.engine.deps.catalog.get("a")
        assert agent is not None
        first = await h.engine.create_run(agent, "check OPS-32", take=True, idempotency_key="born-32")
        assert await h.engine.tasks[first.id] == "succeeded"
        again = await h.engine.create_run(agent, "check OPS-32", take=True, idempotency_key="born-32")
    assert (again.id, again.created) == (first.id, False)
    assert again.born_status == first.born_status == "running"  # what the first request answered
    for table, column in (("runs", "id"), ("checkpoints", "run_id"), ("run_attempts", "run_id")):
        rows = await read_rows(db_url, f"SELECT count(*)::int AS n FROM {table} WHERE {column} = %s", first.id)
        assert rows == [{"n": 1}], table
    audit = await read_rows(
        db_url, "SELECT detail->>'status' AS status FROM audit_log WHERE run_id = %s AND action = 'agent.run.created'",
        first.id,
    )  # fmt: skip
    assert audit == [{"status": "running"}]


async def _true(value: bool) -> bool:
    return value
