"""The one narrow database boundary: a pool, named statements, driver errors translated.

Connections run in autocommit: each named statement is its own transaction, which is what the engine
wants (one statement per checkpoint, per in-doubt mark, per outcome). `transaction()` exists for the
few places that need more than one statement to land together.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps
from psycopg_pool import AsyncConnectionPool

from ticketiq.errors import StorageError
from ticketiq.settings import Settings
from ticketiq.storage import embedded
from ticketiq.storage.queries import QUERIES

log = logging.getLogger(__name__)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=str)


# jsonb parameters are serialized by orjson: several per step, on the hot path.
set_json_dumps(_dumps)

Row = dict[str, Any]
Connection = psycopg.AsyncConnection[Row]

APP_DATABASE = "ticketiq"


@dataclass
class Target:
    """Where the database is, and the embedded server to release when done (if one was used)."""

    url: str
    server: embedded.EmbeddedServer | None = None

    def release(self) -> None:
        if self.server is not None:
            embedded.release(self.server)
            self.server = None


def resolve(settings: Settings, keep: bool = False) -> Target:
    """TICKETIQ_DATABASE_URL when set; else the embedded server in TICKETIQ_HOME, started if needed."""
    if settings.database_url:
        return Target(url=settings.database_url)
    server = embedded.acquire(Path(settings.home), keep=keep)
    with psycopg.connect(server.url(), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (APP_DATABASE,)).fetchone()
        if not exists:
            with contextlib.suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(f"CREATE DATABASE {APP_DATABASE}")
    return Target(url=server.url(APP_DATABASE), server=server)


def sql(name: str) -> str:
    try:
        return QUERIES[name]
    except KeyError:
        raise StorageError(f"no query named {name!r}") from None


class LastInFirstOutPool(AsyncConnectionPool[Connection]):
    """psycopg_pool hands out its connections in turn (first in, first out). We hand out the one used
    last, as PgBouncer does by default: a run's statements then land on a server backend that is still
    warm instead of on the one idle longest, whose CPU may have gone to sleep. On a virtual machine that
    wake-up costs a checkpoint statement tens of microseconds. Connections left unused at the cold end
    are the ones `max_idle` closes."""

    async def _get_ready_connection(self, timeout: float | None) -> Connection | None:  # noqa: ASYNC109 (its signature)
        ready = self._pool
        if len(ready) > 1:
            ready.rotate(1)  # the last returned connection moves to the end psycopg_pool takes from
        return await super()._get_ready_connection(timeout)


class Database:
    """A pool and named statements. Every method takes a query name and keyword parameters."""

    def __init__(self, url: str, min_size: int = 2, max_size: int = 20) -> None:
        self.url = url
        self.pool: AsyncConnectionPool[Connection] = LastInFirstOutPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            connection_class=psycopg.AsyncConnection,
        )

    async def open(self) -> None:
        try:
            await self.pool.open(wait=True, timeout=30)
        except psycopg.Error as exc:
            raise StorageError(f"cannot reach Postgres at {_redact(self.url)}: {exc}") from exc

    async def close(self) -> None:
        await self.pool.close()

    # One statement borrows a connection with getconn/putconn rather than pool.connection(): that
    # context manager also enters the connection's own (a COMMIT check under its lock) and keeps usage
    # statistics, which a checkpoint statement paid for on every step. In autocommit there is nothing to
    # commit or roll back; putconn still discards a connection left broken or mid-query.

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; return how many rows it matched."""
        conn = await self.pool.getconn()
        try:
            return await _execute(conn, name, params)
        finally:
            await self.pool.putconn(conn)

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        conn = await self.pool.getconn()
        try:
            cur = await _cursor(conn, name, params)
            return await cur.fetchone()
        finally:
            await self.pool.putconn(conn)

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        conn = await self.pool.getconn()
        try:
            cur = await _cursor(conn, name, params)
            return await cur.fetchall()
        finally:
            await self.pool.putconn(conn)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Session]:
        async with self.pool.connection() as conn:
            try:
                async with conn.transaction():
                    yield Session(conn)
            except psycopg.Error as exc:
                raise _translate(exc) from exc


class Session:
    """Statements on one connection inside one transaction."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return await _execute(self.conn, name, params)

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        cur = await _cursor(self.conn, name, params)
        return await cur.fetchone()

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cur = await _cursor(self.conn, name, params)
        return await cur.fetchall()


async def connect(url: str) -> Connection:
    """A dedicated connection outside the pool (lease renewal, liveness, LISTEN)."""
    try:
        return await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    except psycopg.Error as exc:
        raise StorageError(f"cannot reach Postgres at {_redact(url)}: {exc}") from exc


async def run_on(conn: Connection, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
    """Run a named statement on a dedicated connection and return its rows (empty if none)."""
    cur = await _cursor(conn, name, params)
    return await cur.fetchall() if cur.description else []


async def listen(conn: Connection, channel: str) -> None:
    """LISTEN on a dedicated connection; the channel is one of ours, never user input."""
    if not channel.replace("_", "").isalnum():
        raise StorageError(f"not a channel name: {channel!r}")
    try:
        await conn.execute(f"LISTEN {channel}")
    except psycopg.Error as exc:
        raise _translate(exc) from exc


async def _execute(conn: Connection, name: str, params: Mapping[str, Any] | None) -> int:
    cur = await _cursor(conn, name, params)
    return cur.rowcount


def _adapt(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Dicts and lists travel as jsonb: the engine speaks Python values, never driver types."""
    return {k: Jsonb(v) if isinstance(v, dict | list) else v for k, v in (params or {}).items()}


async def _cursor(conn: Connection, name: str, params: Mapping[str, Any] | None) -> psycopg.AsyncCursor[Row]:
    try:
        return await conn.execute(sql(name), _adapt(params))
    except psycopg.Error as exc:
        raise _translate(exc, name) from exc


# SQLSTATE classes a later try can get past: connection exceptions, transaction rollbacks (serialization,
# deadlock), insufficient resources, operator intervention (a cancel, a shutdown), system errors.
_RETRYABLE_CLASSES = frozenset({"08", "40", "53", "57", "58"})


def retryable(sqlstate: str | None) -> bool:
    """Whether a statement that failed with this SQLSTATE can succeed when tried again. No state at
    all means the server never answered: the connection failed."""
    return sqlstate is None or sqlstate[:2] in _RETRYABLE_CLASSES


def _translate(exc: psycopg.Error, name: str | None = None) -> StorageError:
    where = f" in {name}" if name else ""
    message = f"database error{where}: {exc.__class__.__name__}: {str(exc).strip()}"
    return StorageError(message, exc.sqlstate, retryable(exc.sqlstate))


def _redact(url: str) -> str:
    """Hide a password in a URL before it reaches a log."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url
