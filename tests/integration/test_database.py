from __future__ import annotations

import asyncio

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
