"""Versioned checkpoints on the real Postgres (migration 031): a take gives a run only to a process that
knows its checkpoint's formats, and the sweeps pass by what no live process knows, so a newer release's
run takes no place in their batches and makes no busy loop. The formats a newer release wrote are set
here by hand on rows today's statements made; `test_newer_format.py` runs a newer release's process."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from tests.support.fence_rig import new_run
from ticketiq.engine import resume
from ticketiq.storage.database import Database
from ticketiq.storage.queries import QUERIES
from ticketiq.storage.run_store import RunStore

NEWER = resume.THIS_RELEASE.state_format + 1
OLD_PROCESS = "process-without-a-row"  # no processes row: it knows what a release before migration 031 knew


async def written_by_newer(db_url: str, run_id: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("UPDATE checkpoints SET state_format = %s WHERE run_id = %s", (NEWER, run_id))


async def lapsed(db_url: str, run_id: str, seconds_ago: float, holder: str = "gone") -> None:
    """The run as its dead process left it: running, its lease lapsed `seconds_ago`."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("UPDATE runs SET status = 'running' WHERE id = %s", (run_id,))
        await conn.execute("INSERT INTO leases (name, holder, expires_at) "
                           "VALUES ('checkpoint:' || %s, %s, now() - make_interval(secs => %s))",
                           (run_id, holder, seconds_ago))  # fmt: skip


async def row(db_url: str, sql: str, *params: Any) -> dict[str, Any] | None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = conn.cursor(row_factory=psycopg.rows.dict_row)
        await cur.execute(sql, params)
        return await cur.fetchone()


@asynccontextmanager
async def live_process(db_url: str, state_format: int) -> AsyncIterator[str]:
    """A registered process knowing `state_format`, alive (its liveness lock held) while in the block."""
    name = f"p-{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as mark:
        born = {"id": name, "pid": 1, "host": "h", "version": "0", "commit": "c", "state_format": state_format,
                "seal_format": resume.THIS_RELEASE.seal_format}  # fmt: skip
        await mark.execute(QUERIES["leader.register"], born)
        yield name


async def test_a_take_gives_a_newer_format_only_to_a_process_that_knows_it(db: Database, db_url: str) -> None:
    store = RunStore(db)
    run_id = await new_run(db)
    await written_by_newer(db_url, run_id)
    before = await row(db_url, "SELECT * FROM checkpoints WHERE run_id = %s", run_id)
    async with live_process(db_url, resume.THIS_RELEASE.state_format) as today:
        for holder in (today, OLD_PROCESS):
            assert await store.acquire(run_id, holder, 30.0) is None
            assert await store.hand(run_id, holder, 30.0) is None
    # Nothing changed: no lease, no attempt, no loss, the checkpoint as it was.
    assert await row(db_url, "SELECT 1 FROM leases WHERE name = 'checkpoint:' || %s", run_id) is None
    assert await row(db_url, "SELECT 1 FROM run_attempts WHERE run_id = %s", run_id) is None
    assert await row(db_url, "SELECT * FROM checkpoints WHERE run_id = %s", run_id) == before
    async with live_process(db_url, NEWER) as newer:
        taken = await store.acquire(run_id, newer, 30.0)
        assert taken is not None and (taken.state_format, taken.attempt, taken.losses) == (NEWER, 1, 0)


async def test_a_claim_gives_a_newer_format_to_the_process_that_knows_it_whoever_is_least_loaded(
    db: Database, db_url: str
) -> None:
    store = RunStore(db)
    runs = [await new_run(db) for _ in range(2)]
    for run_id in runs:
        await written_by_newer(db_url, run_id)
        await lapsed(db_url, run_id, 5)
    async with live_process(db_url, resume.THIS_RELEASE.state_format) as today, live_process(db_url, NEWER) as newer:
        given = await store.claim_lapsed(today, 30.0, 10, [])
        # run_targets spreads two runs over both processes; the one today's process cannot read goes on.
        assert sorted((g.run_id, g.holder, g.state_format) for g in given) == sorted((r, newer, NEWER) for r in runs)


async def test_the_sweeps_pass_by_what_no_live_process_knows(db: Database, db_url: str) -> None:
    store = RunStore(db)
    left, plain = await new_run(db), await new_run(db)
    await written_by_newer(db_url, left)
    await lapsed(db_url, left, 30)  # the older lapse: first in the batch, were it not passed by
    await lapsed(db_url, plain, 5)
    async with live_process(db_url, resume.THIS_RELEASE.state_format) as today:
        given = await store.claim_lapsed(today, 30.0, 1, [])
        assert [(g.run_id, g.holder) for g in given] == [(plain, today)]
        assert await store.claim_lapsed(today, 30.0, 1, []) == []
        # The left lease is no reason to sweep at once: the next lapse is the claimed run's renewed one.
        next_lapse = await store.next_lapse_s(today)
        assert next_lapse is not None and next_lapse > 20
        known = (resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format)
        [shown] = await store.left_for_release(known, 10)
        assert (shown.run_id, shown.state_format, shown.last_holder) == (left, NEWER, "gone")
        assert await store.left_for_release(known, 10, plain) == []
        async with live_process(db_url, NEWER):
            assert await store.left_for_release(known, 10) == []  # a process that knows it lives


async def test_orphaned_queued_runs_of_a_newer_format_take_no_place_in_the_batch(db: Database, db_url: str) -> None:
    store = RunStore(db)
    left, plain = await new_run(db), await new_run(db)
    await written_by_newer(db_url, left)
    async with live_process(db_url, resume.THIS_RELEASE.state_format) as today:
        assert await store.orphaned_queued(today, 0.0, 1) == [plain]
        async with live_process(db_url, NEWER):
            assert await store.orphaned_queued(today, 0.0, 2) == [left, plain]
