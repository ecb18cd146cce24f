"""Numbered migrations (`migrations/NNN_name.sql`) applied in order at start, each in a transaction.

Two processes starting together must not both migrate: the first takes a transaction-level advisory
lock, the second waits on it and then finds nothing left to apply.

Migrations run with no statement timeout (nor an idle-in-transaction one): the connection's limits
are for the engine's statements, and a long migration (or the wait for another process's) must not be
cut off halfway.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ticketiq.storage.database import Database, Row

log = logging.getLogger(__name__)

FOLDER = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x71C4E710  # arbitrary, fixed: "ticketiq migrations"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def discover(folder: Path = FOLDER) -> list[Migration]:
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise ValueError(f"migration file {path.name} is not named NNN_name.sql")
        found.append(Migration(int(match.group(1)), match.group(2), path.read_text()))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


async def migrate(conn: psycopg.AsyncConnection[Row], folder: Path = FOLDER) -> list[int]:
    """Apply what is missing; return the versions applied by this call."""
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        cur = await conn.execute("SELECT version FROM schema_migrations")
        done = {int(row["version"]) for row in await cur.fetchall()}
        for migration in discover(folder):
            if migration.version in done:
                continue
            await conn.execute(migration.sql.encode(), prepare=False)  # many statements: never prepared
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied_now.append(migration.version)
            log.info("applied migration %03d_%s", migration.version, migration.name)
    return applied_now


async def migrate_pooled(db: Database) -> list[int]:
    """`migrate` on one of the pool's connections, not one of its own: each connection opened is a server
    backend started (a process start and each CLI command paid one more for the migrations alone)."""
    async with db.pool.connection() as conn:
        return await migrate(conn)
