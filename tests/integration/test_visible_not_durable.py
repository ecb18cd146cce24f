"""I20 on a real primary and its synchronous standby (tests/support/vanishing.py, issue 18): a commit the
standby never got is visible on the primary, and a failover throws it away. A retry that finds such a
row must not answer "done already" from it. Its found-it statement calls durable() (migration 026), so
its answer comes only once the standby has what it found: with the standby gone the retry's own commit
waits, the client's bound gives up, and the retry fails as retryable instead of reporting success. After
the failover the row is gone, and the retry makes it again.

The control test shows the trap is real on this pair: the same read without durable() answers at once
with a row that the failover then loses. `make mutants` drops each durable() call (tests/support/
durable_rules.py) and runs these tests against it: a retry that answers from a row the standby lacks
fails them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support import vanishing
from tests.support.run_rows import run_params
from ticketiq.errors import StorageError
from ticketiq.intake import idempotency
from ticketiq.intake.idempotency import KeyRow, Verdict
from ticketiq.storage.database import ConnectionLimits, Database
from ticketiq.storage.idempotency_store import IdempotencyStore, KeyRef
from ticketiq.storage.migrate import migrate
from ticketiq.storage.queries import QUERIES
from ticketiq.storage.run_store import RunStore

# A statement the client gives up on after 0.2 s + the answer margin (1 s): the bound a retry meets.
LIMITS = ConnectionLimits(connect_timeout_s=2, statement_timeout_s=0.2, keepalive_s=0)
CLAIM_S = 60.0


async def migrated(url: str) -> None:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    try:
        await migrate(conn)
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def pair() -> Iterator[vanishing.Pair]:
    """One pair for the module (its start takes about two seconds), migrated; stopped and deleted after."""
    with vanishing.pair() as made:
        asyncio.run(migrated(made.primary.url()))
        yield made


@pytest.fixture
def trap(pair: vanishing.Pair) -> Iterator[vanishing.Pair]:
    """The pair, whole again after the test whatever it did (a standby left stopped, commits waiting)."""
    try:
        yield pair
    finally:
        pair.heal()


@contextlib.asynccontextmanager
async def database(url: str) -> AsyncIterator[Database]:
    db = Database(url, min_size=1, max_size=4, limits=LIMITS)
    await db.open()
    try:
        yield db
    finally:
        await db.close()


def rows(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def on_standby(pair: vanishing.Pair, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """What the standby shows, once it replayed what it acknowledged (it acknowledges on flush)."""
    assert pair.standby is not None
    deadline = time.monotonic() + 5
    while not (found := rows(pair.standby.url(), sql, *params)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def key_rows(url: str, ref: KeyRef) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT state FROM idempotency_keys WHERE scope = %s AND principal = %s AND key = %s",
                ref.scope, ref.principal, ref.key)  # fmt: skip


async def gives_up(pending: Any) -> StorageError:
    """The retry's found-it statement: it fails, retryable, at the client's bound (its commit waits)."""
    started = time.monotonic()
    with pytest.raises(StorageError) as failed:
        await pending
    assert failed.value.retryable, failed.value
    assert "no answer within" in str(failed.value)
    assert time.monotonic() - started >= LIMITS.statement_timeout_s
    return failed.value


def new_ref() -> KeyRef:
    return KeyRef("POST /v1/runs", "caller", f"key-{uuid.uuid4()}")


async def test_the_pair_loses_a_commit_visible_on_the_primary_alone(trap: vanishing.Pair) -> None:
    # The control: the trap is real on this pair. A request claims its key (on the primary alone) and keeps
    # its answer; that commit waits for the stopped standby, its client gives up, and it is not visible
    # until its wait is cut short, then visible on the primary alone.
    ref = new_ref()
    trap.detach()
    async with database(vanishing.commit_locally(trap.primary.url())) as first:
        claim = await IdempotencyStore(first).claim(ref, "hash", "first", CLAIM_S)
        assert claim is not None
    async with database(trap.primary.url()) as db:
        await gives_up(IdempotencyStore(db).finish(claim, 201, '{"id": "run-1"}'))
    assert key_rows(trap.primary.url(), ref) == [("working",)]
    assert trap.cut_short() == 1
    assert key_rows(trap.primary.url(), ref) == [("done",)]
    statement = QUERIES["idempotency.get"]
    assert "durable()" in statement
    with psycopg.connect(trap.primary.url(), autocommit=True, row_factory=dict_row) as conn:
        # The retry's read without durable() answers at once: it would replay the kept answer...
        started = time.monotonic()
        row = conn.execute(statement.replace("durable()", "true"), ref.params()).fetchone()
        assert row is not None and time.monotonic() - started < 1.0
        key = KeyRow(row["request_hash"], row["state"], row["expires_at"], row["holder_alive"])
        assert idempotency.decide(key, "hash", row["now"]) is Verdict.REPLAY
        # ... and so would one that only takes a transaction id: it commits without waiting.
        started = time.monotonic()
        assert conn.execute("SELECT pg_current_xact_id()").fetchone() is not None
        assert time.monotonic() - started < 1.0
    trap.fail_over()
    assert key_rows(trap.primary.url(), ref) == []  # ... of a request whose key the new primary never saw


async def test_a_kept_answer_the_standby_lacks_is_not_replayed_and_the_retry_answers_again(
    trap: vanishing.Pair,
) -> None:
    # The first request claimed its key, answered and kept the answer, on the primary alone (its commits
    # did not wait). Its client never got the answer and sends the request again.
    ref = new_ref()
    trap.detach()
    async with database(vanishing.commit_locally(trap.primary.url())) as first:
        store = IdempotencyStore(first)
        claim = await store.claim(ref, "hash", "first", CLAIM_S)
        assert claim is not None and await store.finish(claim, 201, '{"id": "run-1"}')
    assert key_rows(trap.primary.url(), ref) == [("done",)]
    async with database(trap.primary.url()) as db:
        store = IdempotencyStore(db)
        assert await store.claim(ref, "hash", "retry", CLAIM_S) is None  # the key is taken (DO NOTHING: no wait)
        # The kept answer is NOT replayed: reading it waits for the standby, and the client gives up.
        await gives_up(store.get(ref))
        assert trap.waiting_for_standby() == 1
    trap.end_waits()
    trap.fail_over()
    # The key's row went with the old primary: the retry claims it and answers again, and the answer it
    # keeps is on both nodes.
    assert key_rows(trap.primary.url(), ref) == []
    async with database(trap.primary.url()) as db:
        store = IdempotencyStore(db)
        claim = await store.claim(ref, "hash", "retry", CLAIM_S)
        assert claim is not None and await store.finish(claim, 201, '{"id": "run-2"}')
        found = await store.get(ref)
        assert found is not None
        key = KeyRow(found.request_hash, found.state, found.expires_at, found.holder_alive)
        assert idempotency.decide(key, "hash", found.now) is Verdict.REPLAY
        assert found.response == '{"id": "run-2"}'
    assert on_standby(trap, "SELECT response FROM idempotency_keys WHERE key = %s", ref.key) == [('{"id": "run-2"}',)]


def runs_under(url: str, column: str, key: str) -> list[tuple[Any, ...]]:
    assert column in ("idempotency_key", "delegation_key")
    return rows(url, f"SELECT id FROM runs WHERE {column} = %s", key)


async def test_a_run_found_by_its_key_the_standby_lacks_is_not_answered_and_the_retry_makes_it_again(
    trap: vanishing.Pair,
) -> None:
    # Two runs made on the primary alone: one under a request's idempotency key, one a delegation's child
    # under its delegation key. Each maker retries; `create` finds the key taken (DO NOTHING: no wait).
    key, delegation = f"api\tcaller\t{uuid.uuid4()}", f"delegation-{uuid.uuid4()}"
    trap.detach()
    async with database(vanishing.commit_locally(trap.primary.url())) as first:
        store = RunStore(first)
        made = await store.create(run_params(idempotency_key=key))
        child = await store.create(run_params(delegation_key=delegation))
        assert made is not None and child is not None
    async with database(trap.primary.url()) as db:
        store = RunStore(db)
        assert await store.create(run_params(idempotency_key=key)) is None
        await gives_up(store.by_idempotency_key(key))
        assert await store.create(run_params(delegation_key=delegation)) is None
        await gives_up(store.by_delegation_key(delegation))
    trap.end_waits()
    trap.fail_over()
    assert runs_under(trap.primary.url(), "idempotency_key", key) == []
    assert runs_under(trap.primary.url(), "delegation_key", delegation) == []
    async with database(trap.primary.url()) as db:
        store = RunStore(db)
        again = await store.create(run_params(idempotency_key=key))
        child_again = await store.create(run_params(delegation_key=delegation))
        assert again is not None and again.created and child_again is not None and child_again.created
        # Asked once more, each is found, and answered: it is on the standby.
        assert await store.create(run_params(idempotency_key=key)) is None
        found = await store.by_idempotency_key(key)
        assert found is not None and found.id == again.id and not found.created
        found_child = await store.by_delegation_key(delegation)
        assert found_child is not None and found_child.id == child_again.id
    assert on_standby(trap, "SELECT id::text FROM runs WHERE idempotency_key = %s", key) == [(again.id,)]
    assert on_standby(trap, "SELECT id::text FROM runs WHERE delegation_key = %s", delegation) == [(child_again.id,)]
