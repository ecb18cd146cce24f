"""I20 in the normal suite, one found-it statement at a time (tests/support/durable_rules.py FOUND_IT),
through its store: on the path that finds the row already there, the statement's transaction writes a
`ticketiq.durable` WAL record under its transaction id and commits: exactly what makes a commit wait for a
synchronous standby (PostgreSQL waits only for a transaction that has an id AND wrote WAL before its
commit record; an id alone, pg_current_xact_id(), writes nothing before it and waits for nothing). One
record per row found. The path that finds nothing (the first insert) writes none: the hot path pays
nothing. A refusal read under a row lock ("retired already") is raised once the lock's transaction
committed, not after a rollback (which waits for nothing).

Read from the WAL itself with pg_walinspect, by the database's name in the record's payload (migration
026). That such a commit really waits, and what it saves, is shown on a primary and a standby by
test_visible_not_durable.py.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
import pytest

from tests.support.durable_rules import FOUND_IT
from tests.support.run_rows import run_params
from ticketiq.errors import Conflict
from ticketiq.intake.webhook_triggers import retire_refusal
from ticketiq.storage.database import Database
from ticketiq.storage.idempotency_store import IdempotencyStore, KeyRef
from ticketiq.storage.job_store import JobStore
from ticketiq.storage.run_store import RunStore
from ticketiq.storage.schedule_store import ScheduleStore
from ticketiq.storage.teams_store import InboxRow, Seen, TeamsStore
from ticketiq.storage.token_store import TokenStore
from ticketiq.storage.trigger_store import TriggerStore

T = TypeVar("T")


# The WAL flushed since `start` (a commit that waited is flushed): pg_walinspect refuses an empty range.
_SINCE = """
    SELECT w.* FROM (SELECT %s::pg_lsn AS s, pg_current_wal_flush_lsn() AS e) b,
                    LATERAL pg_get_wal_records_info(b.s, b.e) w
     WHERE b.e > b.s"""


async def _flushed(conn: psycopg.AsyncConnection[Any]) -> Any:
    row = await (await conn.execute("SELECT pg_current_wal_flush_lsn()")).fetchone()
    assert row is not None
    return row[0]


@dataclass
class Wal:
    """The `ticketiq.durable` records written while an action ran, read back from the WAL."""

    url: str
    payload: str

    async def during(self, action: Awaitable[T]) -> tuple[T, list[bool]]:
        """The action's result, and for each durable record it wrote whether its transaction committed."""
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            start = await _flushed(conn)
            result = await action
            found = await conn.execute(f"""
                WITH r AS ({_SINCE})
                SELECT EXISTS (SELECT 1 FROM r c WHERE c.resource_manager = 'Transaction'
                                  AND c.record_type = 'COMMIT' AND c.xid = m.xid)
                  FROM r m
                 WHERE m.resource_manager = 'LogicalMessage' AND m.description = %s AND m.xid <> '0'
                 ORDER BY m.start_lsn""", (start, self.payload))  # fmt: skip
            return result, [bool(r[0]) for r in await found.fetchall()]


@pytest.fixture
def wal(db_url: str) -> Wal:
    name = db_url.rsplit("/", 1)[1]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    hexed = " ".join(f"{b:02X}" for b in name.encode())
    return Wal(db_url, f'transactional, prefix "ticketiq.durable"; payload ({len(name.encode())} bytes): {hexed}')


# ----- each found-it statement: the first pays nothing, the repeat's found row is made durable -------------


async def idempotency_get(db: Database, wal: Wal) -> None:
    store, ref = IdempotencyStore(db), KeyRef("POST /v1/runs", "caller", "key-1")
    claim, marks = await wal.during(store.claim(ref, "hash", "first", 60))
    assert claim is not None and marks == []
    taken, marks = await wal.during(store.claim(ref, "hash", "retry", 60))
    assert taken is None and marks == []  # DO NOTHING: it wrote nothing, so it waited for nothing
    found, marks = await wal.during(store.get(ref))
    assert found is not None and marks == [True]


async def runs_by_idempotency_key(db: Database, wal: Wal) -> None:
    store, key = RunStore(db), "api\tcaller\tkey-1"
    made, marks = await wal.during(store.create(run_params(idempotency_key=key)))
    assert made is not None and marks == []
    assert await store.create(run_params(idempotency_key=key)) is None
    found, marks = await wal.during(store.by_idempotency_key(key))
    assert found is not None and found.id == made.id and marks == [True]


async def runs_by_delegation_key(db: Database, wal: Wal) -> None:
    store = RunStore(db)
    made, marks = await wal.during(store.create(run_params(delegation_key="child-of-1")))
    assert made is not None and marks == []
    found, marks = await wal.during(store.by_delegation_key("child-of-1"))
    assert found is not None and found.id == made.id and marks == [True]


async def jobs_create(db: Database, wal: Wal) -> None:
    store, job_id = JobStore(db), str(uuid.uuid4())
    made, marks = await wal.during(store.create(job_id, "source_sync", {}, True, "caller"))
    assert marks == []
    again, marks = await wal.during(store.create(job_id, "source_sync", {}, True, "caller"))
    assert again.id == made.id and marks == [True]


async def jobs_restarted_as(db: Database, wal: Wal) -> None:
    store, old, new = JobStore(db), str(uuid.uuid4()), str(uuid.uuid4())
    await store.create(old, "source_sync", {}, True, "caller")
    assert await store.cancel(old, "caller") is not None
    made, marks = await wal.during(store.restart(old, new, "caller"))
    assert made is not None and marks == []
    assert await store.restart(old, str(uuid.uuid4()), "caller") is None
    found, marks = await wal.during(store.restarted_as(old))
    assert found == new and marks == [True]


async def jobs_found(db: Database, wal: Wal) -> None:
    store, job_id = JobStore(db), str(uuid.uuid4())
    await store.create(job_id, "source_sync", {}, True, "caller")
    assert await store.cancel(job_id, "caller") is not None
    assert await store.cancel(job_id, "caller") is None  # cancelled already: `found` answers it
    found, marks = await wal.during(store.found(job_id))
    assert found is not None and found.status == "cancelled" and marks == [True]


async def schedules_create(db: Database, wal: Wal) -> None:
    store = ScheduleStore(db)
    params = {"id": str(uuid.uuid4()), "agent": "a", "cron": "0 9 * * *", "timezone": "UTC", "input": "daily",
              "next_fire_at": await store.clock(), "by": "caller"}  # fmt: skip
    (_, made), marks = await wal.during(store.create(params))
    assert made and marks == []
    (_, made), marks = await wal.during(store.create(params))
    assert not made and marks == [True]


def inbox_row(activity_id: str) -> InboxRow:
    return InboxRow(activity_id, "conv-1", "content-1", f"teams\t{activity_id}", "http://bot", None, "user-1", "U",
                    "teams:user-1", "hello", "http://app", {"id": activity_id})  # fmt: skip


async def teams_receive(db: Database, wal: Wal) -> None:
    store = TeamsStore(db)

    def store_new(seen: Seen | None, duplicate_of: str | None) -> bool:
        return seen is None and duplicate_of is None

    (_, _, row_id), marks = await wal.during(store.receive(inbox_row("act-1"), 60, store_new))
    assert row_id is not None and marks == []
    # The same activity again: found by its id (by_activity) and by its content (same_content), in the one
    # transaction that decides it, which commits after both were made durable.
    (seen, duplicate_of, row_id), marks = await wal.during(store.receive(inbox_row("act-1"), 60, store_new))
    assert seen is not None and duplicate_of == "act-1" and row_id is None and marks == [True, True]
    # Another activity with the same content: its duplicate, found by content only.
    (seen, duplicate_of, row_id), marks = await wal.during(store.receive(inbox_row("act-2"), 60, store_new))
    assert seen is None and duplicate_of == "act-1" and row_id is None and marks == [True]


async def triggers_delivery(db: Database, wal: Wal) -> None:
    store = TriggerStore(db)
    assert await store.create("hook", "a", ("k", b"n" * 12, b"c" * 32), "admin", None)
    made = await RunStore(db).create(run_params())
    assert made is not None
    missing, marks = await wal.during(store.delivery("hook", "d-1"))
    assert missing is None and marks == []  # a first delivery looks, finds nothing, pays nothing
    recorded, marks = await wal.during(store.record_delivery("hook", "d-1", made.id))
    assert recorded == made.id and marks == []
    other = await RunStore(db).create(run_params())
    assert other is not None
    again, marks = await wal.during(store.record_delivery("hook", "d-1", other.id))
    assert again == made.id and marks == [True]
    found, marks = await wal.during(store.delivery("hook", "d-1"))
    assert found == made.id and marks == [True]


async def triggers_ticket_events(db: Database, wal: Wal) -> None:
    store = TriggerStore(db)
    made, other = await RunStore(db).create(run_params()), await RunStore(db).create(run_params())
    assert made is not None and other is not None
    none, marks = await wal.during(store.event_runs("ev-1"))
    assert none == [] and marks == []
    recorded, marks = await wal.during(store.record_event_run("ev-1", "triage", made.id, "created", "OPS-1", "d" * 64))
    assert recorded == made.id and marks == []
    again, marks = await wal.during(store.record_event_run("ev-1", "triage", other.id, "created", "OPS-1", "d" * 64))
    assert again == made.id and marks == [True]
    found, marks = await wal.during(store.event_runs("ev-1"))
    assert [r.run_id for r in found] == [made.id] and marks == [True]


async def approvals_get(db: Database, wal: Wal) -> None:
    store = RunStore(db)
    made = await store.create(run_params())
    assert made is not None
    approval_id = str(uuid.uuid4())
    await store.bound(made.id, 0).file_approval({"id": approval_id, "step": 1, "idx": 0, "tool": "probe_write",
                                                 "args": {}, "step_key": "k", "binding": "b"})  # fmt: skip
    decided, marks = await wal.during(store.decide(approval_id, "approved", "ops", None))
    assert decided is not None and marks == []  # a decision writes: it needs no more
    assert await store.decide(approval_id, "rejected", "other", None) is None
    found, marks = await wal.during(store.approval(approval_id))
    assert found is not None and found.status == "approved" and marks == [True]


async def tokens_get(db: Database, wal: Wal) -> None:
    store = TokenStore(db)
    assert await store.create("ops", "operator", None, "a" * 64, "admin") is not None
    revoked, marks = await wal.during(store.revoke("ops", "admin"))
    assert revoked is not None and marks == []
    assert await store.revoke("ops", "admin") is None
    found, marks = await wal.during(store.get("ops"))
    assert found is not None and found.revoked_at is not None and marks == [True]


SCENARIOS: dict[str, Callable[[Database, Wal], Awaitable[None]]] = {
    "idempotency.get": idempotency_get,
    "runs.by_idempotency_key": runs_by_idempotency_key,
    "runs.by_delegation_key": runs_by_delegation_key,
    "jobs.create": jobs_create,
    "jobs.restarted_as": jobs_restarted_as,
    "jobs.found": jobs_found,
    "schedules.create": schedules_create,
    "teams.by_activity": teams_receive,
    "teams.same_content": teams_receive,
    "triggers.delivery": triggers_delivery,
    "triggers.ticket_event_runs": triggers_ticket_events,
    "triggers.ticket_event_run": triggers_ticket_events,
    "tokens.get": tokens_get,
    "approvals.get": approvals_get,
}


@pytest.mark.parametrize("statement", sorted(SCENARIOS))
async def test_a_found_row_is_made_durable_and_a_first_insert_pays_nothing(
    statement: str, db: Database, wal: Wal
) -> None:
    await SCENARIOS[statement](db, wal)


def test_every_found_it_statement_has_its_scenario() -> None:
    assert set(SCENARIOS) == set(FOUND_IT)


async def test_an_id_alone_writes_nothing_before_its_commit_record(db_url: str, wal: Wal) -> None:
    # Why durable() emits a message: a transaction that only takes an id (pg_current_xact_id()) writes no
    # WAL before its COMMIT record, and PostgreSQL decides whether a commit waits for the standby by the
    # WAL written before it: this one does not wait (test_visible_not_durable.py shows it answering).
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        start = await _flushed(conn)
        row = await (await conn.execute("SELECT xid(pg_current_xact_id())::text")).fetchone()
        assert row is not None
        deadline = time.monotonic() + 5
        while True:  # such a commit is flushed by the WAL writer, a moment later
            found = await conn.execute(f"SELECT record_type FROM ({_SINCE}) r WHERE xid::text = %s", (start, row[0]))
            types = [r[0] for r in await found.fetchall()]
            if types or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert types == ["COMMIT"]


async def test_a_refused_retire_is_answered_once_the_lock_it_read_under_committed(
    db: Database, db_url: str, wal: Wal
) -> None:
    # "Secret 1 was retired already" is read under the trigger's row lock, a write: the refusal is raised
    # once that transaction committed (and so waited for the standby), never after a rollback, which
    # waits for nothing.
    store = TriggerStore(db)
    assert await store.create("hook", "a", ("k", b"n" * 12, b"c" * 32), "admin", None)
    assert await store.add_secret("hook", ("k", b"n" * 12, b"c" * 32), None, "admin", lambda _: None) == 2
    assert await store.retire_secret("hook", 1, "admin", lambda s: retire_refusal(s, 1))
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        start = await _flushed(conn)
        with pytest.raises(Conflict, match="retired already"):
            await store.retire_secret("hook", 1, "admin", lambda s: retire_refusal(s, 1))
        ended = await conn.execute(f"""
            WITH r AS ({_SINCE})
            SELECT l.record_type, (SELECT e.record_type FROM r e WHERE e.resource_manager = 'Transaction'
                                      AND e.xid = l.xid)
              FROM r l
             WHERE l.resource_manager = 'Heap' AND l.record_type = 'LOCK'
               AND l.block_ref LIKE '%%/' || (SELECT oid FROM pg_database WHERE datname = current_database()) || '/%%'
            """, (start,))  # fmt: skip
        assert await ended.fetchall() == [("LOCK", "COMMIT")]
