"""What `ticketiq db restore` asks of the database it restores into (I24), on the one connection it holds:
whether it is empty, and the mark of every run the backup holds unfinished."""

from __future__ import annotations

from typing import Any

import psycopg

from ticketiq.storage.queries import QUERIES


async def tables(conn: psycopg.AsyncConnection[dict[str, Any]]) -> int:
    """Tables outside the catalogs: a restore goes only into a database with none."""
    row = await (await conn.execute(QUERIES["restore.tables"])).fetchone()
    assert row is not None
    return int(row["n"])


async def mark(conn: psycopg.AsyncConnection[dict[str, Any]], label: str) -> int:
    """I24: every run unfinished at the backup's point marked restored (and audited); how many."""
    row = await (await conn.execute(QUERIES["restore.mark"], {"label": label})).fetchone()
    assert row is not None
    return int(row["n"])
