"""Numbered migrations (`migrations/NNN_name.sql`) applied in order at start, each in a transaction.

Two processes starting together must not both migrate: the first takes a transaction-level advisory
lock, the second waits on it and then finds nothing left to apply.

Migrations run with no statement timeout (nor an idle-in-transaction one): the connection's limits
are for the engine's statements, and a long migration (or the wait for another process's) must not be
cut off halfway.

Expand, then contract: each migration's first line declares whether the previous release can run beside
it (`-- beside: previous`), or not and why (`-- beside: none: <why>`: it drops or narrows what the
previous release still uses). Migrations run while the old processes serve (a roll); one that the old
release cannot run beside is refused while a live process of another release is registered, and
`ticketiq db migrate --check` names it before anyone tries.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg

from ticketiq.errors import TicketIQError
from ticketiq.runtime import release
from ticketiq.storage.database import Database, Row

log = logging.getLogger(__name__)

FOLDER = Path(__file__).parent / "migrations"
_LOCK_KEY = 0x71C4E710  # arbitrary, fixed: "ticketiq migrations"
_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
_BESIDE = re.compile(r"^-- beside: (previous|none: (\S.*))$")


class MigrationRefused(TicketIQError):
    """A migration the previous release cannot run beside, while a process of another release is live."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str
    beside: bool = True  # the previous release can run beside it
    why: str = ""  # when it cannot

    @property
    def label(self) -> str:
        return f"{self.version:03d}_{self.name}"


@dataclass(frozen=True)
class LiveProcess:
    id: str
    version: str | None
    commit: str | None

    @property
    def release(self) -> str:
        return (
            "a release before migration 030" if self.version is None else f"{self.version} {self.commit or ''}".strip()
        )


def declared(name: str, sql: str) -> tuple[bool, str]:
    """Pure: (the previous release can run beside it, why not) from the migration's first line."""
    first = sql.split("\n", 1)[0].strip()
    match = _BESIDE.match(first)
    if match is None:
        raise ValueError(f"migration {name} must begin with `-- beside: previous` or `-- beside: none: <why>`")
    return match.group(1) == "previous", match.group(2) or ""


def blockers(pending: list[Migration]) -> list[Migration]:
    """Pure: the pending migrations the previous release cannot run beside."""
    return [m for m in pending if not m.beside]


def refusal(pending: list[Migration], others: list[LiveProcess]) -> str | None:
    """Pure: why these migrations may not be applied now, or None. Only while a live process of another
    release is registered: with none, nothing runs beside them."""
    blocking = blockers(pending)
    if not blocking or not others:
        return None
    what = "; ".join(f"{m.label} ({m.why})" for m in blocking)
    who = ", ".join(f"{p.id} ({p.release})" for p in others)
    return (f"migration {what} cannot run beside the previous release, and processes of another release are "
            f"live: {who}. Roll every process to this release first, or stop them; `ticketiq db migrate "
            "--check` lists what is pending")  # fmt: skip


def discover(folder: Path = FOLDER) -> list[Migration]:
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = _NAME.match(path.name)
        if not match:
            raise ValueError(f"migration file {path.name} is not named NNN_name.sql")
        sql = path.read_text()
        beside, why = declared(path.name, sql)
        found.append(Migration(int(match.group(1)), match.group(2), sql, beside, why))
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise ValueError(f"migrations must be numbered 1..n without gaps, found {versions}")
    return found


async def migrate(conn: psycopg.AsyncConnection[Row], folder: Path = FOLDER) -> list[int]:
    """Apply what is missing; return the versions applied by this call. Refused (MigrationRefused, nothing
    applied) when a pending migration cannot run beside the previous release while a process of another
    release is live."""
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SET LOCAL statement_timeout = 0")
        await conn.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        pending = await _pending(conn, folder)
        if blockers(pending):
            why = refusal(pending, await other_releases(conn))
            if why is not None:
                raise MigrationRefused(why)
        for migration in pending:
            await conn.execute(migration.sql.encode(), prepare=False)  # many statements: never prepared
            await conn.execute(
                "INSERT INTO schema_migrations (version, name) VALUES (%s, %s)",
                (migration.version, migration.name),
            )
            applied_now.append(migration.version)
            log.info("applied migration %03d_%s", migration.version, migration.name)
    return applied_now


async def _pending(conn: psycopg.AsyncConnection[Row], folder: Path, create: bool = True) -> list[Migration]:
    if create:
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " version int PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
    elif not (
        await (await conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL AS made")).fetchone() or {}
    ).get("made"):
        return discover(folder)
    cur = await conn.execute("SELECT version FROM schema_migrations")
    done = {int(row["version"]) for row in await cur.fetchall()}
    return [m for m in discover(folder) if m.version not in done]


async def other_releases(conn: psycopg.AsyncConnection[Row]) -> list[LiveProcess]:
    """The live app processes (their liveness mark held) that run another release than this one."""
    cur = await conn.execute("SELECT to_regclass('processes') IS NOT NULL AS made, to_regprocedure("
                             "'process_alive(text)') IS NOT NULL AS alive_fn")  # fmt: skip
    found = await cur.fetchone()
    if found is None or not (found["made"] and found["alive_fn"]):
        return []  # a database made before processes were recorded: none is registered
    has_release = await (await conn.execute(
        "SELECT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'processes' "
        "AND column_name = 'version') AS has"
    )).fetchone()  # fmt: skip
    columns = (
        "version, build_commit"
        if has_release and has_release["has"]
        else "NULL::text AS version, NULL::text AS build_commit"
    )
    cur = await conn.execute(
        f"SELECT id, {columns} FROM processes WHERE ended_at IS NULL AND process_alive(id) ORDER BY started_at, id"
    )
    running = release.current()
    live: list[LiveProcess] = []
    for row in await cur.fetchall():
        if (row["version"], row["build_commit"]) != (running.version, running.commit):
            live.append(LiveProcess(str(row["id"]), row["version"], row["build_commit"]))
    return live


async def check(conn: psycopg.AsyncConnection[Row], folder: Path = FOLDER) -> tuple[list[Migration], list[LiveProcess]]:
    """`ticketiq db migrate --check`: the pending migrations and the live processes of another release
    (read only: nothing is applied, the pending list is read under no lock)."""
    async with conn.transaction():
        pending = await _pending(conn, folder, create=False)
        return pending, await other_releases(conn)


async def migrate_pooled(db: Database) -> list[int]:
    """`migrate` on one of the pool's connections, not one of its own: each connection opened is a server
    backend started (a process start and each CLI command paid one more for the migrations alone)."""
    async with db.pool.connection() as conn:
        return await migrate(conn)
