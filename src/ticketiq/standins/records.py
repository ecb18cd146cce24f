"""The stand-ins' storage: the write log, dedupe claims and each vendor's state, in schema `standin`.

The stand-ins are a separate app that the engine never imports, so they keep their own pool and their
own named statements (`queries.sql`, area `standin`) rather than the engine's storage package.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ticketiq.errors import StorageError
from ticketiq.storage.queries import parse

Row = dict[str, Any]
_Connection = psycopg.AsyncConnection[Row]

_HERE = Path(__file__).parent
QUERIES = parse((_HERE / "queries.sql").read_text(), "standin")
SCHEMA = (_HERE / "schema.sql").read_text()
# The schema's text, named by its hash in the schema's comment once applied: a start that finds this
# version applied runs none of it (its idempotent ALTERs and COMMENTs still took their locks and wrote the
# catalog at every start).
SCHEMA_VERSION = f"ticketiq stand-ins {hashlib.sha256(SCHEMA.encode()).hexdigest()[:16]}"


async def ensure_schema(conn: _Connection) -> None:
    """The stand-ins' schema, applied unless this version of it is; in the caller's transaction, under the
    lock that keeps two stand-ins starting on one database from racing it."""
    session = Session(conn)
    await session.fetch_one("standin.lock_schema")
    found = await session.fetch_one("standin.schema_version")
    if found is not None and found["version"] == SCHEMA_VERSION:
        return
    await conn.execute(SCHEMA.encode())
    await conn.execute(sql.SQL("COMMENT ON SCHEMA standin IS {}").format(sql.Literal(SCHEMA_VERSION)))


# The User-Agent of the request being answered, set by the stand-in app's middleware for each request.
CLIENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("standin_client", default=None)
# Its W3C traceparent: the span of the engine's call that sent it (runtime/tracing.py), recorded beside it.
TRACEPARENT: contextvars.ContextVar[str | None] = contextvars.ContextVar("standin_traceparent", default=None)


class Effect(StrEnum):
    APPLIED = "applied"
    DEDUPED = "deduped"
    REFUSED = "refused"


@dataclass(frozen=True)
class Write:
    """A write request as received: what it is about and the key it carried (if any)."""

    vendor: str
    operation: str
    target: str
    key: str | None
    body: Any


@dataclass(frozen=True)
class Answer:
    """What a stand-in answers a request, and what the request came to."""

    status: int
    body: Any
    effect: Effect = Effect.APPLIED
    ref: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Claim:
    """A dedupe claim: `won` when this write is the first in the window; else `ref` is the original's."""

    won: bool
    ref: str
    fingerprint: str


def jsonb(value: Any) -> Jsonb:
    return Jsonb(value)


def fingerprint(value: Any) -> str:
    """A stable text of a body, to tell a repeat from a different request under the same key."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


class Session:
    """Named statements on one connection inside one transaction."""

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        cur = await _cursor(self.conn, name, params)
        return await cur.fetchone() if cur.description else None

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cur = await _cursor(self.conn, name, params)
        return await cur.fetchall() if cur.description else []

    async def claim(self, vendor: str, scope: str, key: str, ref: str, window_s: float, body: Any) -> Claim:
        """Claim `key` for `ref` for `window_s` seconds (inf: for ever), concurrency-safe: of two
        concurrent claims one wins and the other waits for it, then sees its ref."""
        params = {
            "vendor": vendor,
            "scope": scope,
            "key": key,
            "ref": ref,
            "fingerprint": fingerprint(body),
            "window_s": window_s,
        }
        won = await self.fetch_one("standin.claim", params)
        if won is not None:
            return Claim(True, won["ref"], won["fingerprint"])
        held = await self.fetch_one("standin.claimed", params)
        if held is None:  # claims are never deleted, so a claim that lost has a holder
            raise StorageError(f"dedupe claim on {vendor}/{scope}/{key} vanished")
        return Claim(False, held["ref"], held["fingerprint"])

    async def record(self, write: Write, answer: Answer) -> None:
        await self.fetch_one(
            "standin.record_write",
            {
                "vendor": write.vendor,
                "operation": write.operation,
                "target": write.target,
                "key": write.key,
                "effect": answer.effect.value,
                "status": answer.status,
                "ref": answer.ref,
                "body": jsonb(write.body),
                "client": CLIENT.get(),
                "traceparent": TRACEPARENT.get(),
            },
        )


class Store:
    """The stand-ins' pool. `open()` creates schema `standin` and its tables if they are missing."""

    def __init__(self, url: str, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self.pool: AsyncConnectionPool[_Connection] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True, "row_factory": dict_row},
            connection_class=psycopg.AsyncConnection,
            # A connection the database's restart cut is replaced before a request uses it, rather
            # than failing the request: a vendor keeps answering across a restart of our Postgres.
            check=AsyncConnectionPool.check_connection,
        )

    async def open(self) -> None:
        try:
            await self.pool.open(wait=True, timeout=30)
        except psycopg.Error as exc:
            raise StorageError(f"stand-ins cannot reach Postgres: {exc}") from exc
        async with self.transaction() as session:
            try:
                await ensure_schema(session.conn)
            except psycopg.Error as exc:
                raise StorageError(f"stand-in schema could not be created: {exc}") from exc

    async def close(self) -> None:
        await self.pool.close()

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Session]:
        async with self.pool.connection() as conn, conn.transaction():
            yield Session(conn)

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        async with self.pool.connection() as conn:
            return await Session(conn).fetch_one(name, params)

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        async with self.pool.connection() as conn:
            return await Session(conn).fetch_all(name, params)

    async def record(self, write: Write, answer: Answer) -> None:
        async with self.pool.connection() as conn:
            await Session(conn).record(write, answer)


async def _cursor(conn: _Connection, name: str, params: Mapping[str, Any] | None) -> psycopg.AsyncCursor[Row]:
    try:
        query = QUERIES[name]
    except KeyError:
        raise StorageError(f"no stand-in query named {name!r}") from None
    try:
        return await conn.execute(query, params or {})
    except psycopg.Error as exc:
        raise StorageError(f"stand-in database error in {name}: {exc}") from exc
