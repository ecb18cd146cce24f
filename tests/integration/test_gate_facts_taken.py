"""The gates' facts a take reads in its own statement (runs.acquire, runs.create_taken; issue 19): a run
starts from them, with no read of its own, only while nothing changed the gates after the take was sent.
A change heard after that (the gate listener's generation moved) is read again before the first step."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.support.crash import eventually
from tests.support.engine import Harness, engine_under_test, read_rows
from tests.support.run_statements import statements_run
from ticketiq.storage.rows import Created

READ: dict[str, Any] = {"calls": [{"tool": "probe_read", "arguments": {"note": "{jira_key}"}}]}
SCRIPTS = {"a": [READ, {"text": "answered {jira_key}"}]}
AGENTS = {"a": {"tools": ["probe_read"]}}


async def test_a_quarantine_heard_after_the_take_is_read_before_the_first_step(db_url: str, tmp_path: Path) -> None:
    async with queued_run(db_url, tmp_path, "check OPS-21") as (h, created):
        watch = h.engine.deps.gate_watch
        before = watch.current()
        sent_at = time.monotonic()
        taken = await h.engine.store.acquire(created.id, h.engine.deps.holder, h.settings.lease_ttl_s)
        assert taken is not None and taken.facts is not None
        assert taken.facts.agent_quarantine is None  # as the take found the gates
        await h.engine.deps.gates.quarantine("agent", "a", "under review", "ops")
        await eventually(lambda: _true(watch.current() != before), what="the quarantine heard")
        assert h.engine.launch(taken, sent_at, facts_generation=before)
        assert await h.engine.tasks[created.id] == "failed"
    run = await read_rows(db_url, "SELECT error FROM runs WHERE id = %s", created.id)
    assert "agent a is quarantined: under review" in run[0]["error"]
    assert h.asked == []  # refused before its first step: the model was never asked (the run gate)
    assert h.probe.received == []


async def test_facts_the_take_read_are_the_first_steps_when_nothing_changed(db_url: str, tmp_path: Path) -> None:
    async with queued_run(db_url, tmp_path, "check OPS-22") as (h, created):
        await read_rows(db_url, "SELECT pg_stat_statements_reset()")
        assert await h.engine.start(created.id)
        assert await h.engine.tasks[created.id] == "succeeded"
        ran = await statements_run(db_url)
    reads = [n for q, n in ran.items() if "gate_context" in q and not re.search("take_run|INSERT INTO runs", q)]
    assert sum(reads) == 0  # the acquire read them: no runs.gate_facts


@asynccontextmanager
async def queued_run(db_url: str, tmp_path: Path, text: str) -> AsyncIterator[tuple[Harness, Created]]:
    """A process whose gate listener is connected, and a run of agent `a` made queued (not taken)."""
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False, job_concurrency=0) as h:
        watch = h.engine.deps.gate_watch
        await eventually(lambda: _true(watch.connected), what="the gate listener connected")
        agent = h.engine.deps.catalog.get("a")
        assert agent is not None
        yield h, await h.engine.create_run(agent, text, take=False)


async def _true(value: bool) -> bool:
    return value
