"""The one narrow database boundary: a pool, named statements, driver errors translated.

Connections run in autocommit: each named statement is its own transaction, which is what the engine
wants (one statement per checkpoint, per in-doubt mark, per outcome). `transaction()` exists for the
few places that need more than one statement to land together.

No database I/O waits forever. Every connection, pooled or dedicated, opens within the connect timeout,
carries TCP keepalives and a server-side statement timeout, and every statement is also bounded on the
client: a peer that went silent (a stalled network, a frozen server) cannot answer a cancel either, so
the server's own timeout is not enough. A statement that overruns its bound, or whose caller gives up
on it, has its connection's socket shut down under it, fails at once (as retryable), and the connection
is closed, never reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from time import monotonic
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.abc import PQGen
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb, set_json_dumps
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from ticketiq.errors import StorageError
from ticketiq.runtime import stall
from ticketiq.settings import Settings
from ticketiq.storage import hosts, lean
from ticketiq.storage.outage import BACKOFF_CAP_S, BACKOFF_FIRST_S, Outage
from ticketiq.storage.queries import QUERIES

log = logging.getLogger(__name__)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=str)


# jsonb parameters are serialized by orjson: several per step, on the hot path.
set_json_dumps(_dumps)

Row = dict[str, Any]
T = TypeVar("T")

# The longest a wait on a connection's socket sleeps with no news before it looks again (Connection.wait).
QUIET_WAKE_S = 5.0


class Connection(psycopg.AsyncConnection[Row]):
    """A connection whose statements give up at once when the task waiting on one is cancelled (a
    lease lost, a readiness probe out of time, a clean stop). psycopg answers that cancellation by
    sending the server a cancel request and waiting again for the statement's answer, up to 10 s: a
    peer that went silent answers neither, and the cancelled task would hang on. Instead its socket is
    shut down: psycopg's wait fails at once and it closes the connection (a pool discards it)."""

    async def cancel_safe(self, *, timeout: float = 30.0) -> None:  # noqa: ASYNC109 (its signature)
        shut_down(self)

    async def wait(
        self,
        gen: PQGen[T],
        interval: float = QUIET_WAKE_S,
        timeout: float | None = None,  # noqa: ASYNC109 (psycopg's)
    ) -> T:
        """psycopg waits on the socket itself: lean.py's watch of it comes off first (lean.Prepared).

        psycopg wakes a wait every 0.1 s with no news (its interval, for a blocking program's Ctrl-C): on
        an idle process's three listening connections (liveness, the leader's sweep, the gate watch) some
        34 wake-ups a second that read nothing. A wait here ends on its socket, its own timeout (each
        listener's poll, 0.25-1 s) or its task's cancellation; the interval is only a backstop."""
        lean.unwatch(self)
        return await super().wait(gen, interval, timeout)

    async def close(self) -> None:
        """Never closed while the event loop still watches its socket (lean.Prepared)."""
        lean.unwatch(self)
        await super().close()

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs: Any) -> Connection:
        """Every connection, pooled or dedicated, tries the server that last took one first, and the
        others beside it after a head start (hosts.py)."""

        async def one(single: str) -> Connection:
            return await super(Connection, cls).connect(single, **kwargs)

        async def close(conn: Connection) -> None:
            await conn.close()

        conn = await hosts.first_of(hosts.split(hosts.ordered(conninfo)), one, close)
        hosts.took(conn.info.host, conn.info.port)
        return conn


def shut_down(conn: Connection) -> None:
    """Shut the connection's socket down under whatever waits on it, which then fails at once. A
    duplicate of the descriptor is used: shutdown() acts on the socket itself, and the connection's own
    descriptor stays valid (no other socket can take its number before psycopg lets go of it)."""
    with contextlib.suppress(OSError, psycopg.Error), socket.socket(fileno=os.dup(conn.pgconn.socket)) as dup:
        dup.shutdown(socket.SHUT_RDWR)


APP_DATABASE = "ticketiq"

# The client gives up on a statement this long after the server should have cancelled it: time for
# the server's answer (or its cancellation error) to arrive.
ANSWER_MARGIN_S = 1.0
# A silent peer is probed every half keepalive time once idle that long, and dropped after this many
# probes go unanswered: about three keepalive times after it went quiet.
KEEPALIVE_PROBES = 4


@dataclass(frozen=True)
class ConnectionLimits:
    """How long the database may take, on every connection the process opens (pooled and dedicated):
    to open one, to run one statement, and to show it is still there. Built from Settings; nothing here
    reads the environment. A value of 0 turns its bound off."""

    connect_timeout_s: float
    statement_timeout_s: float
    keepalive_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(settings.db_connect_timeout_s, settings.db_statement_timeout_s, settings.db_keepalive_s)

    def parameters(self) -> dict[str, str]:
        """The libpq connection parameters that carry these limits."""
        params: dict[str, str] = {}
        if self.connect_timeout_s > 0:
            # libpq counts whole seconds and never fewer than 2.
            params["connect_timeout"] = str(max(2, math.ceil(self.connect_timeout_s)))
        if self.keepalive_s > 0:
            idle = max(1, math.ceil(self.keepalive_s))
            interval = max(1, math.ceil(idle / 2))
            params |= {
                "keepalives": "1", "keepalives_idle": str(idle), "keepalives_interval": str(interval),
                "keepalives_count": str(KEEPALIVE_PROBES),
                # Keepalives only probe an idle connection; this bounds data sent and never acknowledged.
                "tcp_user_timeout": str((idle + KEEPALIVE_PROBES * interval) * 1000),
            }  # fmt: skip
        else:
            params["keepalives"] = "0"
        statement_ms = str(round(self.statement_timeout_s * 1000))
        # A transaction left open by a stalled process would hold its row locks: the server ends it.
        params["options"] = f"-c statement_timeout={statement_ms} -c idle_in_transaction_session_timeout={statement_ms}"
        return params

    def conninfo(self, url: str) -> str:
        """`url` with these limits as connection parameters; `options` already in it are kept (ours
        come last, so they win over the same setting there)."""
        params: dict[str, Any] = conninfo_to_dict(url)
        ours = self.parameters()
        if params.get("options"):
            ours["options"] = f"{params['options']} {ours['options']}"
        return make_conninfo("", **{**params, **ours})

    @property
    def connect_within_s(self) -> float | None:
        """Client-side bound on opening a connection: libpq's own (whole seconds) and a margin."""
        if self.connect_timeout_s <= 0:
            return None
        return max(2, math.ceil(self.connect_timeout_s)) + ANSWER_MARGIN_S

    @property
    def answer_within_s(self) -> float | None:
        """Client-side bound on one statement: the server's statement timeout and a margin."""
        if self.statement_timeout_s <= 0:
            return None
        return self.statement_timeout_s + ANSWER_MARGIN_S

    @property
    def pool_wait_s(self) -> float:
        """How long a statement waits for a pooled connection: for one to open, or a busy one to be
        given back. Unbounded limits keep psycopg_pool's default."""
        waits = [w for w in (self.connect_within_s, self.answer_within_s) if w is not None]
        return sum(waits) if waits else 30.0


DEFAULT_LIMITS = ConnectionLimits.from_settings(Settings())


def sql(name: str) -> str:
    try:
        return QUERIES[name]
    except KeyError:
        raise StorageError(f"no query named {name!r}") from None


_POSITIONAL: dict[str, lean.Positional] = {}


def positional(name: str) -> lean.Positional:
    """The statement's `$n` form (lean.py), converted at its first use."""
    found = _POSITIONAL.get(name)
    if found is None:
        found = _POSITIONAL[name] = lean.positional(sql(name))
    return found


_IDLE = TransactionStatus.IDLE


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

    _checking: asyncio.Task[None] | None = None

    async def _add_connection(self, attempt: AttemptWithBackoff | None, growing: bool = False) -> None:
        """A connection opened (again) on psycopg_pool's schedule, but with our backoff: psycopg_pool
        waits 1 s, then doubles without bound, so after a 10 s failover the pool would find the new
        primary up to 8 s after every other connection did."""
        await super()._add_connection(attempt or CappedBackoff(timeout=self.reconnect_timeout), growing)

    async def getconn(self, timeout: float | None = None) -> Connection:  # noqa: ASYNC109 (its signature)
        """The common case taken without an await: a connection idle, nobody queued for one, nobody in the
        pool's critical section. psycopg_pool's own way (its lock, two INFO log calls, its check and
        timeout bookkeeping) cost a checkpoint statement about as much as sending it on libpq; its
        statistics are kept the same. Anything else goes psycopg_pool's own way. (A closed pool holds no
        connection, and none sits idle while a client is queued: psycopg_pool hands it over instead.)"""
        ready = self._pool
        if ready and self._check is None and not self._lock.locked():
            conn = ready.pop()  # the one given back last, as _get_ready_connection hands out below
            if len(ready) < self._nconns_min:
                self._nconns_min = len(ready)
            self._stats[self._REQUESTS_NUM] += 1
            conn._pool = self  # a pooled connection is returned, never closed, by its __aexit__
            return conn
        return await super().getconn(timeout)

    async def putconn(self, conn: Connection) -> None:
        """A connection cut under its statement (the server restarted or was killed) says that those idle
        beside it were most likely cut too: they are checked now, in the background (a round trip each),
        instead of each failing the next statement given it (a request answered 503, a step tried again).

        A healthy connection given back idle, with nobody queued and nobody in the pool's critical
        section, goes straight back to the pool (the mirror of `getconn`); psycopg_pool's own way checks
        the same things, under its lock, and logs."""
        if conn.broken and (self._checking is None or self._checking.done()):
            self._checking = asyncio.create_task(self.check(), name="pool-check")
            self._checking.add_done_callback(_checked)
        if (
            conn._pool is self
            and conn.pgconn.transaction_status == _IDLE
            and not self._waiting
            and self._reset is None
            and self._pool_full_event is None
            and not self._closed
            and not self._lock.locked()
            and self._drained_at < conn._created_at
            and monotonic() < conn._expire_at
        ):
            conn._pool = None  # as psycopg_pool does: no reference loop while it sits in the pool
            self._pool.append(conn)
            return
        await super().putconn(conn)

    async def close(self, timeout: float = 5.0) -> None:  # noqa: ASYNC109 (its signature)
        if self._checking is not None:
            self._checking.cancel()
            await asyncio.gather(self._checking, return_exceptions=True)
        await super().close(timeout)


class CappedBackoff(AttemptWithBackoff):
    """psycopg_pool's reconnection attempts, first after BACKOFF_FIRST_S and never further apart than
    BACKOFF_CAP_S (outage.py)."""

    INITIAL_DELAY = BACKOFF_FIRST_S

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, BACKOFF_CAP_S)


def _checked(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("checking the pool's idle connections failed: %r", task.exception())


class Database:
    """A pool and named statements. Every method takes a query name and keyword parameters."""

    def __init__(
        self, url: str, min_size: int = 2, max_size: int = 20, limits: ConnectionLimits = DEFAULT_LIMITS
    ) -> None:
        self.url = url
        self.limits = limits
        self.within_s = limits.answer_within_s  # each statement's bound, computed once
        self.outage = Outage()  # told of every statement's failure, and of the first answer after one
        self.pool: AsyncConnectionPool[Connection] = LastInFirstOutPool(
            limits.conninfo(url),
            min_size=min_size,
            max_size=max_size,
            open=False,
            # Prepared at their first use on each connection, not their fifth (psycopg's default): with
            # twenty pooled connections, the hot statements were each parsed and planned a hundred times
            # over before all of them were prepared, and again after every pool drain.
            kwargs={"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0},
            connection_class=Connection,
            timeout=limits.pool_wait_s,
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
    # commit or roll back; putconn still discards a connection left broken, closed or mid-query.

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        """Run a statement; return how many rows it matched. Sent on libpq itself (lean.py): a step's
        checkpoint is one of these."""
        statement = positional(name)
        return await self._pooled(name, lambda conn: lean.execute(conn, name, statement, _adapt(params)))

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        rows = await self._fetch(name, params, first_only=True)
        return rows[0] if rows else None

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        return await self._fetch(name, params)

    async def _fetch(self, name: str, params: Mapping[str, Any] | None, first_only: bool = False) -> list[Row]:
        """A statement's rows, sent on libpq itself as `execute`'s are (a run's creation and every read
        of the API are one of these): psycopg's cursor cost as much again as the statement."""
        statement = positional(name)
        return await self._pooled(name, lambda conn: lean.fetch(conn, name, statement, _adapt(params), first_only))

    async def _pooled(self, name: str, exchange: Callable[[Connection], Awaitable[T]]) -> T:
        """One exchange on a connection of the pool, bounded (`_bounded`), the outage told of its end."""
        conn = await self._getconn()
        try:
            done = await _bounded(conn, name, self.within_s, lambda: exchange(conn))
        except StorageError as exc:
            self.outage.failed(exc)
            raise
        finally:
            await self.pool.putconn(conn)
        if self.outage.down_since is not None:
            self.outage.answered()
        return done

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Session]:
        """Statements that land together. BEGIN and COMMIT are bounded like any statement (psycopg's
        own transaction block would wait on them unbounded)."""
        within = self.within_s
        conn = await self._getconn()
        try:
            await _control(conn, "BEGIN", within)
            try:
                yield Session(conn, within)
            except BaseException:
                if not conn.closed:
                    with contextlib.suppress(StorageError):
                        await _control(conn, "ROLLBACK", within)
                raise
            await _control(conn, "COMMIT", within)
        finally:
            await self.pool.putconn(conn)

    async def _getconn(self) -> Connection:
        """A pooled connection within the pool's wait (psycopg_pool's PoolTimeout is retryable)."""
        try:
            return await self.pool.getconn()
        except psycopg.Error as exc:
            raise _translate(exc, "pool.getconn") from exc


class Session:
    """Statements on one connection inside one transaction."""

    def __init__(self, conn: Connection, within_s: float | None) -> None:
        self.conn = conn
        self.within_s = within_s

    async def execute(self, name: str, params: Mapping[str, Any] | None = None) -> int:
        return await _execute(self.conn, name, params, self.within_s)

    async def fetch_one(self, name: str, params: Mapping[str, Any] | None = None) -> Row | None:
        cur = await _cursor(self.conn, name, params, self.within_s)
        return await cur.fetchone()

    async def fetch_all(self, name: str, params: Mapping[str, Any] | None = None) -> list[Row]:
        cur = await _cursor(self.conn, name, params, self.within_s)
        return await cur.fetchall()


async def connect(url: str, limits: ConnectionLimits) -> Connection:
    """A dedicated connection outside the pool (lease renewal, liveness, LISTEN), with the pool's
    limits, opened within the connect timeout."""
    try:
        async with asyncio.timeout(limits.connect_within_s):
            return await Connection.connect(limits.conninfo(url), autocommit=True, row_factory=dict_row)
    except psycopg.Error as exc:
        raise StorageError(f"cannot reach Postgres at {_redact(url)}: {exc}") from exc
    except TimeoutError:
        raise StorageError(
            f"cannot reach Postgres at {_redact(url)}: no connection within {limits.connect_within_s:g} s"
        ) from None


async def run_on(
    conn: Connection, name: str, params: Mapping[str, Any] | None = None, *, within_s: float | None
) -> list[Row]:
    """Run a named statement on a dedicated connection and return its rows (empty if none). No answer
    within `within_s` (None: no bound but the server's): the connection is closed, a retryable
    StorageError raised."""
    cur = await _cursor(conn, name, params, within_s)
    return await cur.fetchall() if cur.description else []


async def ping(conn: Connection, *, within_s: float | None) -> None:
    """Show a dedicated connection still answers (one that only listens sends nothing otherwise)."""
    await run_on(conn, "runs.ping", within_s=within_s)


async def listen(conn: Connection, channel: str, *, within_s: float | None) -> None:
    """LISTEN on a dedicated connection; the channel is one of ours, never user input."""
    if not channel.replace("_", "").isalnum():
        raise StorageError(f"not a channel name: {channel!r}")
    await _control(conn, f"LISTEN {channel}", within_s)


class AnsweredWithin:
    """Bounds one exchange with the server. Past `within_s` the connection's socket is shut down under
    it (rather than the task cancelled: see `Connection`), so psycopg's wait fails at once; the
    connection is then closed (a pool discards it) and the failure is a retryable StorageError. Plain
    methods, not an async context manager: every statement pays for this guard."""

    __slots__ = ("conn", "severed", "timer", "what", "within_s")

    def __init__(self, conn: Connection, within_s: float | None, what: str) -> None:
        self.conn = conn
        self.within_s = within_s
        self.what = what
        self.severed = False
        self.timer = None if within_s is None else asyncio.get_running_loop().call_later(within_s, self._sever)

    def _sever(self) -> None:
        self.severed = True
        log.warning("no answer from Postgres within %g s in %s; closing the connection", self.within_s, self.what)
        shut_down(self.conn)

    def disarm(self) -> bool:
        """After the exchange; True when it was severed (the connection must then be closed)."""
        if self.timer is not None:
            self.timer.cancel()
        return self.severed

    async def severed_by(self, exc: BaseException | None) -> None:
        """Severed, maybe just as the answer came: the connection is unusable either way, and a driver
        error becomes the retryable failure it is."""
        await self.conn.close()
        if isinstance(exc, psycopg.Error):
            raise StorageError(
                f"database error in {self.what}: no answer within {self.within_s:g} s; the connection was closed",
                None, True,
            ) from exc  # fmt: skip


async def _bounded(conn: Connection, what: str, within_s: float | None, exchange: Callable[[], Awaitable[T]]) -> T:
    """One exchange with the server, as every statement and command is made: never from a process stalled
    past its leases, bounded by `within_s` (`AnsweredWithin`), a driver error translated."""
    stall.check()  # a process stalled past its leases sends nothing more
    guard = AnsweredWithin(conn, within_s, what)
    try:
        done = await exchange()
    except BaseException as exc:
        if guard.disarm():
            await guard.severed_by(exc)
        if isinstance(exc, psycopg.Error):
            raise _translate(exc, what) from exc
        raise
    if guard.disarm():
        await guard.severed_by(None)
    return done


async def _execute(conn: Connection, name: str, params: Mapping[str, Any] | None, within_s: float | None) -> int:
    cur = await _cursor(conn, name, params, within_s)
    return cur.rowcount


_JSONB = (dict, list)  # a tuple: isinstance checks one faster than a `dict | list` union, once per parameter


def _adapt(params: Mapping[str, Any] | None) -> dict[str, Any]:
    """Dicts and lists travel as jsonb: the engine speaks Python values, never driver types."""
    return {k: Jsonb(v) if isinstance(v, _JSONB) else v for k, v in (params or {}).items()}


async def _cursor(
    conn: Connection, name: str, params: Mapping[str, Any] | None, within_s: float | None
) -> psycopg.AsyncCursor[Row]:
    return await _bounded(conn, name, within_s, lambda: conn.execute(sql(name), _adapt(params)))


async def _control(conn: Connection, command: str, within_s: float | None) -> None:
    """A transaction or LISTEN command (not a named query: it names no data)."""
    await _bounded(conn, command, within_s, lambda: conn.execute(command))


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
