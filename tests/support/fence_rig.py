"""Fences under attack, on the real Postgres: a run or a job held by one attempt, taken over by another
process (a committed take, or a take held open in a transaction of its own while the statement runs),
and everything written about it, to show a fenced statement wrote nothing."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from ticketiq.storage.database import Database
from ticketiq.storage.job_store import JobHandle, JobStore
from ticketiq.storage.run_store import RunHandle, RunStore, Sealed

HOLDER = "process-1"  # the process whose attempt is raised underneath it
TAKER = "process-2"  # the process that takes over

# Everything a statement can write about a run, read the way another process would read it.
_RUN_ROWS = {
    "run": "SELECT * FROM runs WHERE id = %(id)s",
    "checkpoint": "SELECT * FROM checkpoints WHERE run_id = %(id)s",
    "calls": "SELECT * FROM calls WHERE run_id = %(id)s ORDER BY step, idx",
    "approvals": "SELECT * FROM approvals WHERE run_id = %(id)s ORDER BY created_at, id",
    "transcript": "SELECT id, kind, body FROM transcripts WHERE run_id = %(id)s ORDER BY id",
    "answer": "SELECT * FROM answers WHERE run_id = %(id)s",
    "inputs": "SELECT * FROM inputs WHERE run_id = %(id)s ORDER BY step, idx",
    "audit": "SELECT id, action, actor, detail FROM audit_log WHERE run_id = %(id)s ORDER BY id",
    "lease": "SELECT * FROM leases WHERE name = 'checkpoint:' || %(id)s",
    "fires": "SELECT f.* FROM schedule_fires f JOIN runs r ON f.run_key = r.idempotency_key WHERE r.id = %(id)s",
    "attempts": "SELECT * FROM run_attempts WHERE run_id = %(id)s ORDER BY attempt",
}
_JOB_ROWS = {
    "job": "SELECT * FROM jobs WHERE id = %(id)s",
    "steps": "SELECT * FROM workflow_steps WHERE job_id = %(id)s ORDER BY seq",
    "knowledge": "SELECT * FROM knowledge WHERE job_id = %(id)s ORDER BY source, key",
    "classifiers": "SELECT * FROM classifiers WHERE job_id = %(id)s",
    "answers": "SELECT * FROM red_team_answers WHERE job_id = %(id)s ORDER BY idx",
    "audit": "SELECT id, action, actor, detail FROM audit_log WHERE detail ->> 'job_id' = %(id)s::text ORDER BY id",
    "lease": "SELECT * FROM leases WHERE name = 'job:' || %(id)s",
}


async def written(conn: psycopg.AsyncConnection[Any], of: str, kind: str = "run") -> dict[str, Any]:
    """Every row written about run (or job) `of`, as `conn` sees them now."""
    out: dict[str, Any] = {}
    for what, sql in (_RUN_ROWS if kind == "run" else _JOB_ROWS).items():
        cur = await conn.cursor(row_factory=dict_row).execute(sql, {"id": of})
        out[what] = await cur.fetchall()
    return out


async def written_now(db_url: str, of: str, kind: str = "run") -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        return await written(conn, of, kind)


def sealed(step: int, losses: int = 0, prev_seal: str | None = "seal-0") -> Sealed:
    """A checkpoint to write; these tests judge fences, not seals (the resume verifies those)."""
    return Sealed(step=step, state=f'{{"step": {step}}}', seal=f"seal-{step}", key_id="k1", prev_seal=prev_seal,
                  losses=losses, state_format=1, seal_format=2)  # fmt: skip


async def new_run(db: Database, channel: str = "api", idempotency_key: str | None = None) -> str:
    run_id = str(uuid.uuid4())
    made = await RunStore(db).create({
        "id": run_id, "agent": "a", "input": "look at OPS-1", "owner": "tester", "tenant": "t1", "channel": channel,
        "may_wait": True, "correlation_id": run_id, "parent_run_id": None, "delegation_key": None,
        "idempotency_key": idempotency_key, "request_hash": None, "state": "{}", "seal": "seal-0", "key_id": "k1",
        "actor": "test", "created_by": None, "audit": {}, "state_format": 1, "seal_format": 2,
    })  # fmt: skip
    assert made is not None
    return run_id


async def driven_run(db: Database, channel: str = "api", idempotency_key: str | None = None) -> RunHandle:
    """A run taken by HOLDER under attempt 1: the handle its driver holds."""
    store = RunStore(db)
    run_id = await new_run(db, channel, idempotency_key)
    taken = await store.acquire(run_id, HOLDER, 30.0)
    assert taken is not None and taken.attempt == 1
    return store.bound(run_id, taken.attempt)


async def running_job(db: Database, kind: str = "source_sync", params: dict[str, Any] | None = None) -> JobHandle:
    """A job claimed by HOLDER: the handle its worker holds."""
    store = JobStore(db)
    made = await store.create(str(uuid.uuid4()), kind, params or {}, True, "ops")
    claimed = await store.claim(HOLDER, 30.0, 1)
    assert [c.id for c in claimed] == [made.id]
    return store.handle(made.id, claimed[0].attempt, HOLDER)


async def take_run(conn: psycopg.AsyncConnection[Any], run_id: str, holder: str = TAKER) -> int:
    """Another process takes the run (a claim: the lease and a new attempt, one loss), as the sweep does."""
    cur = await conn.execute("SELECT attempt FROM take_run(%s, %s, 30, true)", (run_id, holder))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def take_job(conn: psycopg.AsyncConnection[Any], job_id: str, holder: str = TAKER) -> int:
    """Another worker takes the job, as the sweep and a claim do: a new attempt under another holder."""
    cur = await conn.execute(
        "WITH lease AS (UPDATE leases SET holder = %s WHERE name = 'job:' || %s::text) "
        "UPDATE jobs SET attempt = attempt + 1, holder = %s, losses = losses + 1 WHERE id = %s RETURNING attempt",
        (holder, job_id, holder, job_id),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def raised(conn: psycopg.AsyncConnection[Any], run_id: str) -> int:
    """The run's attempt raised and nothing else: its lease still names the attempt it was given under.
    A take would rewrite that lease too; this shows the attempt condition holds on its own."""
    cur = await conn.execute("UPDATE checkpoints SET attempt = attempt + 1 WHERE run_id = %s RETURNING attempt",
                             (run_id,))  # fmt: skip
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def given_to(conn: psycopg.AsyncConnection[Any], run_id: str, holder: str = HOLDER) -> int:
    """The leader's take gives the run to `holder` (migration 012: its lease marked handed, not taken up)."""
    cur = await conn.execute("SELECT attempt FROM take_run(%s, %s, 30, true, 'lapsed')", (run_id, holder))
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def taken_over(db_url: str, of: str, kind: str = "run") -> int:
    """A takeover committed: the attempt the statement's process holds is raised underneath it."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        return await (take_run if kind == "run" else take_job)(conn, of)


@dataclass
class HeldTakeover:
    """A take done in a transaction of its own and not yet committed: it holds the rows it took."""

    conn: psycopg.AsyncConnection[Any]
    db_url: str
    of: str
    kind: str
    attempt: int = 0

    @property
    def pid(self) -> int:
        return int(self.conn.info.backend_pid)

    async def take(self, holder: str = TAKER) -> dict[str, Any]:
        """Take it; returns what the takeover's own transaction sees written (the take included)."""
        self.attempt = await (take_run if self.kind == "run" else take_job)(self.conn, self.of, holder)
        return await written(self.conn, self.of, self.kind)

    async def raise_attempt(self) -> dict[str, Any]:
        """Only raise the run's attempt (its checkpoint row), leaving its lease as it is."""
        self.attempt = await raised(self.conn, self.of)
        return await written(self.conn, self.of, self.kind)

    async def waited_on_by(self, task: asyncio.Future[Any], what: str = "the statement") -> None:
        """Until `task` (started after the take) waits on this transaction's row locks. A statement that
        finishes instead did not wait: it read its fence from before the take."""
        async with await psycopg.AsyncConnection.connect(self.db_url, autocommit=True) as look:
            while True:
                cur = await look.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", (self.pid,)
                )
                row = await cur.fetchone()
                if row is not None and row[0] > 0:
                    return
                if task.done():
                    exc = task.exception()
                    raise AssertionError(f"{what} did not wait for the takeover's commit (it ended: {exc!r})")
                await asyncio.sleep(0.01)

    async def commit(self) -> None:
        await self.conn.commit()


@contextlib.asynccontextmanager
async def held_takeover(db_url: str, of: str, kind: str = "run") -> AsyncIterator[HeldTakeover]:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=False) as conn:
        yield HeldTakeover(conn, db_url, of, kind)
