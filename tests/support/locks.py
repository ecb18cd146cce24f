"""Locks a test holds in another transaction, to hold a request mid-statement, and the wait until a
statement waits on one: ordering by the database's own locks, not by sleeping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg

from tests.support.crash import eventually
from tests.support.engine import read_rows


@asynccontextmanager
async def held(db_url: str, statement: str, *params: Any) -> AsyncIterator[None]:
    """A lock taken by another connection, in a transaction open until the block ends (then rolled back)."""
    async with await psycopg.AsyncConnection.connect(db_url) as conn:
        await conn.execute(statement, params or None)
        try:
            yield
        finally:
            await conn.rollback()


async def waiting_on_lock(db_url: str, statement_start: str) -> None:
    """Until a statement starting so waits on a lock: the request making it is held mid-answer."""

    async def waits() -> bool:
        rows = await read_rows(
            db_url,
            "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            f"%{statement_start}%",
        )
        return int(rows[0]["n"]) > 0

    await eventually(waits, what=f"a request waiting on the lock in {statement_start}")
