from __future__ import annotations

import asyncio

import psycopg
import pytest

from ticketiq.errors import StorageError
from ticketiq.storage.database import Database


async def backend_pid(db: Database) -> int:
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        row = await cur.fetchone()
        assert row is not None
        return int(row["pid"])


async def test_the_pool_hands_out_the_connection_returned_last(db_url: str) -> None:
    db = Database(db_url, min_size=3, max_size=3)
    await db.open()
    try:
        # Hold all three at once, then give them back one after another.
        releases = [asyncio.Event() for _ in range(3)]
        taken = [asyncio.Event() for _ in range(3)]
        order: list[int] = []

        async def hold(i: int) -> None:
            async with db.pool.connection() as conn:
                cur = await conn.execute("SELECT pg_backend_pid() AS pid")
                row = await cur.fetchone()
                assert row is not None
                taken[i].set()
                await releases[i].wait()
                order.append(int(row["pid"]))

        holders = [asyncio.create_task(hold(i)) for i in range(3)]
        for event in taken:
            await event.wait()
        for release, holder in zip(releases, holders, strict=True):
            release.set()
            await holder  # back in the pool before the next one is let go
        assert len(set(order)) == 3
        # psycopg_pool alone would give the first returned; the warm one is the last returned.
        assert await backend_pid(db) == order[-1]
        assert await backend_pid(db) == order[-1]  # and again: one run's statements keep one backend
    finally:
        await db.close()


async def test_a_connection_killed_under_the_pool_fails_one_statement_and_is_replaced(db_url: str) -> None:
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    try:
        victim = await backend_pid(db)
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
            await admin.execute("SELECT pg_terminate_backend(%s)", (victim,))
        with pytest.raises(StorageError, match=r"database error in runs\.gate_facts"):
            await db.fetch_one("runs.gate_facts", {"run_id": "00000000-0000-0000-0000-000000000000"})
        # The broken connection went back to the pool and was replaced, not handed out again.
        async with asyncio.timeout(10):
            while True:
                try:
                    replacement = await backend_pid(db)
                    break
                except psycopg.OperationalError:
                    await asyncio.sleep(0.05)
        assert replacement != victim
        assert await db.fetch_one("runs.gate_facts", {"run_id": "00000000-0000-0000-0000-000000000000"}) is None
    finally:
        await db.close()
