"""`LastInFirstOutPool`'s way around psycopg_pool's lock (storage/database.py): a connection idle and
nobody queued is handed out and taken back without an await, and every other case still goes
psycopg_pool's own way. The way reads psycopg_pool's private state, so the first test fails the day a
release of it renames or retypes what is read (pyproject.toml pins it below 3.4 for that reason)."""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import PoolClosed

from ticketiq.storage.database import Connection, Database, LastInFirstOutPool


@pytest.fixture
async def one(db_url: str) -> AsyncIterator[LastInFirstOutPool]:
    """The engine's pool of one connection."""
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    assert isinstance(db.pool, LastInFirstOutPool)
    try:
        yield db.pool
    finally:
        await db.close()


async def test_psycopg_pool_still_has_what_the_fast_path_reads(one: LastInFirstOutPool) -> None:
    assert isinstance(one._pool, collections.deque)
    assert isinstance(one._waiting, collections.deque)
    assert isinstance(one._lock, asyncio.Lock)
    assert one._check is None and one._reset is None and one._pool_full_event is None
    assert one._closed is False
    assert isinstance(one._nconns_min, int) and isinstance(one._drained_at, float)
    assert isinstance(one._stats, collections.Counter) and one._REQUESTS_NUM == "requests_num"
    conn = one._pool[0]
    assert isinstance(conn._created_at, float) and isinstance(conn._expire_at, float)
    assert conn._pool is None  # psycopg_pool keeps no reference back while it is pooled
    # psycopg_pool's own getconn and putconn still name the same state: its way, taken by hand, leaves
    # the counters and the pool as the fast way does.
    before = one.get_stats().get("requests_num", 0)
    held = await super(LastInFirstOutPool, one).getconn()
    assert held is conn and held._pool is one and not one._pool
    await super(LastInFirstOutPool, one).putconn(held)
    assert list(one._pool) == [conn] and conn._pool is None
    assert one.get_stats()["requests_num"] == before + 1


async def test_an_idle_connection_is_handed_out_and_back_without_psycopg_pools_way(
    one: LastInFirstOutPool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    before = one.get_stats().get("requests_num", 0)
    conn = await one.getconn()
    assert conn._pool is one and not one._pool
    await one.putconn(conn)
    assert list(one._pool) == [conn] and conn._pool is None
    assert one.get_stats()["requests_num"] == before + 1  # counted as psycopg_pool counts it
    assert not [r for r in caplog.records if r.name == "psycopg.pool"]  # its way logs both ends


async def test_a_client_queued_for_a_connection_is_handed_the_one_given_back(one: LastInFirstOutPool) -> None:
    held = await one.getconn()
    waiter = asyncio.create_task(one.getconn())
    while not one._waiting:
        await asyncio.sleep(0.01)
    await one.putconn(held)
    # Put in the pool instead, it would sit there while the client waits out the pool's timeout.
    given = await asyncio.wait_for(waiter, 5)
    assert given is held
    await one.putconn(given)


async def test_a_connection_given_back_inside_a_transaction_is_rolled_back(one: LastInFirstOutPool) -> None:
    conn = await one.getconn()
    await conn.execute("BEGIN")
    await conn.execute("CREATE TEMP TABLE left_open (n int)")
    await one.putconn(conn)
    again = await one.getconn()
    try:
        assert again.info.transaction_status.name == "IDLE"
        cur = await again.execute("SELECT count(*) AS n FROM pg_class WHERE relname = 'left_open'")
        assert await cur.fetchone() == {"n": 0}
    finally:
        await one.putconn(again)


async def test_a_connection_past_its_lifetime_is_closed_not_pooled(db_url: str) -> None:
    pool: LastInFirstOutPool = LastInFirstOutPool(
        db_url, min_size=1, max_size=1, max_lifetime=0.5, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        conn = await pool.getconn()
        await asyncio.sleep(0.6)
        await pool.putconn(conn)
        assert conn.closed
        assert conn not in pool._pool
        fresh = await pool.getconn(timeout=10)  # psycopg_pool opened its replacement
        assert fresh is not conn
        await pool.putconn(fresh)
    finally:
        await pool.close()


async def test_a_connection_out_during_a_drain_is_closed_when_given_back(one: LastInFirstOutPool) -> None:
    conn = await one.getconn()
    await one.drain()
    await one.putconn(conn)
    assert conn.closed
    fresh = await one.getconn(timeout=10)
    assert fresh is not conn
    await one.putconn(fresh)


async def test_a_connection_given_back_to_a_closed_pool_is_closed(db_url: str) -> None:
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    conn = await db.pool.getconn()
    await db.close()
    await db.pool.putconn(conn)
    assert conn.closed


async def test_a_pool_with_a_check_has_every_connection_checked(db_url: str) -> None:
    checked: list[Connection] = []

    async def check(conn: Any) -> None:
        checked.append(conn)

    pool: LastInFirstOutPool = LastInFirstOutPool(
        db_url, min_size=1, max_size=1, check=check, open=False, kwargs={"autocommit": True}
    )
    await pool.open(wait=True)
    try:
        conn = await pool.getconn()
        await pool.putconn(conn)
        assert checked == [conn]
    finally:
        await pool.close()


async def test_a_closed_pool_hands_out_nothing(db_url: str) -> None:
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    await db.close()
    with pytest.raises(PoolClosed):
        await db.pool.getconn()
