"""The pool's statements, sent on libpq itself (psycopg's `pq`): `execute` answers how many rows one
matched, `fetch` its rows.

A read-only step writes one statement, its checkpoint, and a cursor is a costly way to send it: psycopg's
async cursor spends about 0.09 ms of Python on each statement (a cursor, the query's conversion, a
result object, generators driven through `waiting.wait_async`), as much as the rest of the step's
engine code. What `Database.execute` sends wants none of that: a known text, its parameters, and the
count the fence checks (I3). Nor do `fetch_one` and `fetch_all` (a run's creation, every read of the
API): their rows are loaded by the same loaders a cursor uses, without the cursor. So each is sent
here, on the pooled connection's own `PGconn`:

- the text is converted once per statement to its `$n` form (`positional`, a pure function), and
  prepared once per connection and parameter types, as psycopg's cursor would (prepare threshold 0);
- the parameters are dumped by psycopg's own `Transformer`, so their types and texts are psycopg's;
- the answer is waited for on the connection's socket, reading and writing as libpq asks (a parameter
  larger than the socket's buffer is written in parts), and its error is psycopg's exception for its
  SQLSTATE, so `database._translate` sees what it always saw.

Whatever interrupts an exchange before its last result was read (a cancelled task, a lost server, the
`AnsweredWithin` bound shutting the socket down) leaves the connection unusable, and it is closed: the
pool discards it and no later statement can read this one's answer. psycopg's own statements on the
same connection (a `transaction`'s) are untouched: ours are prepared under names of our own, never
used twice on a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import errors, pq
from psycopg.abc import Buffer
from psycopg.adapt import PyFormat, Transformer

Connection = psycopg.AsyncConnection[Any]

# Statements kept prepared on one connection, as psycopg keeps at most 100 of its own (`prepared_max`): a
# process sends some 200 named statements over the day, each in a few parameter types.
MAX_PREPARED = 128

_PLACEHOLDER = re.compile(r"%(?:\((\w+)\)s|(%)|(.|\Z))", re.DOTALL)


@dataclass(frozen=True)
class Positional:
    """A named statement's text with `$n` placeholders, and the parameter each number stands for."""

    text: bytes
    params: tuple[str, ...]


def positional(sql: str) -> Positional:
    """`%(name)s` to `$n` (a name used twice keeps its number), `%%` to `%`; any other `%` directive is
    refused, as psycopg refuses it."""
    order: dict[str, int] = {}

    def one(found: re.Match[str]) -> str:
        name, percent, other = found.groups()
        if percent:
            return "%"
        if other is not None or name is None:
            raise ValueError(f"only %(name)s placeholders and %% are allowed, found %{other or ''}")
        number = order.setdefault(name, len(order) + 1)
        return f"${number}"

    return Positional(_PLACEHOLDER.sub(one, sql).encode(), tuple(order))


class Prepared:
    """A connection's statements prepared here (by statement and parameter types, under names of ours),
    and its socket watched for our answers.

    The watch stays on between statements: adding and removing a reader for each answer cost a statement
    about 9 µs (the event loop's bookkeeping, and some seven system calls a step by `strace -c`: `epoll_ctl`
    adding and deleting, half of them failing, an `ioctl` and an `io_uring_enter`). It is taken off
    whenever psycopg is to wait on the socket itself (its own reader replaces ours and is removed after
    it) and before the connection closes (`unwatch`): the loop must never watch a descriptor that was closed, or one
    that now belongs to another socket. Readable while no statement of ours waits (the server spoke up
    unasked, or hung up), the watch takes itself off at its second call, so an idle connection never
    spins the loop. (The first may be stale: asyncio's selector loop can make it in the same turn as,
    and after, the waiting task's, which read the answer and went on.)"""

    __slots__ = ("fd", "idle_calls", "loop", "made", "names", "transformer", "waiter")

    def __init__(self, conn: Connection) -> None:
        self.transformer = Transformer(conn)
        self.names: dict[tuple[str, tuple[int, ...]], bytes] = {}
        # How many statements were ever prepared here: a name is never used twice on the connection. After
        # psycopg's DEALLOCATE ALL (it sends one after a ROLLBACK or a DROP it sees) ours are prepared again,
        # while any prepared since still exist; numbering again from the names known would collide with them.
        self.made = 0
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop watching `fd`, None when unwatched
        self.fd = -1
        self.waiter: asyncio.Future[None] | None = None
        self.idle_calls = 0

    async def readable(self, fd: int) -> None:
        """Until the socket can be read."""
        loop = asyncio.get_running_loop()
        if self.loop is not loop or self.fd != fd:
            self.unwatch()
            loop.add_reader(fd, self._wake)
            self.loop, self.fd = loop, fd
        self.waiter = woken = loop.create_future()
        self.idle_calls = 0
        try:
            await woken
        finally:
            self.waiter = None

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is None:
            self.idle_calls += 1
            if self.idle_calls > 1:
                self.unwatch()
        elif not waiter.done():
            waiter.set_result(None)

    def unwatch(self) -> None:
        if self.loop is not None:
            loop, self.loop = self.loop, None
            if not loop.is_closed():
                loop.remove_reader(self.fd)


def unwatch(conn: Connection) -> None:
    """Before psycopg waits on the connection's socket itself, and before it closes (see `Prepared`)."""
    found: Prepared | None = getattr(conn, "_lean", None)
    if found is not None:
        found.unwatch()


async def execute(conn: Connection, name: str, statement: Positional, params: Mapping[str, Any]) -> int:
    """Run the statement on `conn` (in autocommit, checked out); return how many rows it matched. An
    error of the statement raises psycopg's exception for its SQLSTATE, the connection still usable;
    anything else closes the connection before it goes on."""
    result = (await _statement(conn, name, statement, params))[1]
    if result is None:
        return 0
    return result.command_tuples if result.command_tuples is not None else result.ntuples


async def fetch(
    conn: Connection, name: str, statement: Positional, params: Mapping[str, Any], first_only: bool = False
) -> list[dict[str, Any]]:
    """Run the statement as `execute` does; return its rows as dicts of column to value (psycopg's
    `dict_row`), loaded by the connection's own loaders (psycopg's `Transformer`), as its cursor would
    load them. `first_only`: at most the first row is loaded."""
    prepared, result = await _statement(conn, name, statement, params)
    if result is None or result.status != pq.ExecStatus.TUPLES_OK or not result.ntuples:
        return []
    tx = prepared.transformer
    tx.set_pgresult(result)
    encoding = conn.info.encoding
    names = [(result.fname(i) or b"").decode(encoding) for i in range(result.nfields)]
    try:
        rows: list[dict[str, Any]] = tx.load_rows(
            0, 1 if first_only else result.ntuples, lambda values: dict(zip(names, values, strict=True))
        )
    finally:
        tx.set_pgresult(None)  # not kept by an idle connection in the pool: a list's rows can be many
    return rows


async def _statement(
    conn: Connection, name: str, statement: Positional, params: Mapping[str, Any]
) -> tuple[Prepared, pq.abc.PGresult | None]:
    """The connection's statements, and this one's last result (prepared on `conn` at its first use
    there; see `execute`)."""
    prepared: Prepared | None = getattr(conn, "_lean", None)
    if prepared is None:
        prepared = Prepared(conn)
        conn._lean = prepared  # type: ignore[attr-defined]  # kept on the connection, gone with it
    tx = prepared.transformer
    values = tx.dump_sequence([params[p] for p in statement.params], [PyFormat.AUTO] * len(statement.params))
    types, formats = tuple(tx.types or ()), list(tx.formats or ())
    key = (name, types)
    try:
        try:
            return prepared, await _prepared(conn, prepared, key, statement.text, values, formats)
        except errors.InvalidSqlStatementName:
            # Our statements were deallocated under us (a DISCARD ALL or DEALLOCATE ALL on the
            # connection, psycopg's own after a ROLLBACK among them): prepared again, once.
            prepared.names.clear()
            return prepared, await _prepared(conn, prepared, key, statement.text, values, formats)
    except errors.Error as exc:
        if exc.sqlstate is not None and conn.pgconn.status == pq.ConnStatus.OK and _idle(conn):
            raise  # the statement's own error: the connection read its whole answer
        await _discard(conn)
        raise
    except BaseException:
        await _discard(conn)
        raise


async def _prepared(
    conn: Connection,
    prepared: Prepared,
    key: tuple[str, tuple[int, ...]],
    text: bytes,
    values: Sequence[Buffer | None],
    formats: list[pq.Format],
) -> pq.abc.PGresult | None:
    pgconn = conn.pgconn
    server_name = prepared.names.get(key)
    if server_name is None:
        if len(prepared.names) >= MAX_PREPARED:
            # The first prepared goes (the names keep their order): a pooled connection lives for hours,
            # and each statement prepared holds server memory in its backend until the session ends.
            oldest = prepared.names.pop(next(iter(prepared.names)))
            pgconn.send_query(b"DEALLOCATE " + oldest)
            _answer(await _exchange(pgconn, prepared), conn)
        server_name = b"tq_%d" % prepared.made
        prepared.made += 1
        pgconn.send_prepare(server_name, text, param_types=key[1])
        _answer(await _exchange(pgconn, prepared), conn)
        prepared.names[key] = server_name
    pgconn.send_query_prepared(server_name, values, param_formats=formats)
    return _answer(await _exchange(pgconn, prepared), conn)


def _idle(conn: Connection) -> bool:
    return conn.pgconn.transaction_status == pq.TransactionStatus.IDLE


async def _discard(conn: Connection) -> None:
    """Closed, so the pool drops it: an answer still on its way must never reach a later statement."""
    with contextlib.suppress(psycopg.Error, OSError):
        await conn.close()


def _answer(results: list[pq.abc.PGresult], conn: Connection) -> pq.abc.PGresult | None:
    """The exchange's last result; the first error among them raised as psycopg's."""
    for result in results:
        status = result.status
        if status == pq.ExecStatus.FATAL_ERROR:
            raise _error(result, conn)
        if status not in (pq.ExecStatus.COMMAND_OK, pq.ExecStatus.TUPLES_OK):
            raise errors.InterfaceError(f"unexpected answer to a statement: {pq.ExecStatus(status).name}")
    return results[-1] if results else None


def _error(result: pq.abc.PGresult, conn: Connection) -> errors.Error:
    encoding = conn.info.encoding
    sqlstate = result.error_field(pq.DiagnosticField.SQLSTATE)
    message = (result.error_field(pq.DiagnosticField.MESSAGE_PRIMARY) or result.error_message or b"").decode(
        encoding, "replace"
    )
    kind = errors.lookup(sqlstate.decode()) if sqlstate else errors.DatabaseError
    return kind(message)


async def _exchange(pgconn: pq.abc.PGconn, prepared: Prepared) -> list[pq.abc.PGresult]:
    """Send what libpq holds and read every result of it (libpq's nonblocking protocol: flush until it
    says all is sent, reading whenever the server writes back meanwhile; then read until not busy).

    Input is read before the first wait, though just after sending there is none yet: a connection the
    server cut while it sat idle fails here, from the socket's own error, instead of waiting on a watch
    that uvloop may have dropped with that error (it calls the reader once, then closes its poll). A
    second wait in one exchange (an answer in parts) watches anew, for the same reason."""
    fd = pgconn.socket
    if pgconn.flush():  # 1: more to send; the socket's buffer is full
        prepared.unwatch()  # `_ready` watches it for reading too, and takes that watch off after
        loop = asyncio.get_running_loop()
        while pgconn.flush():
            await _ready(loop, fd, writing=True)
            pgconn.consume_input()
    results: list[pq.abc.PGresult] = []
    waited = False
    while True:
        pgconn.consume_input()
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                return results
            results.append(result)
        if waited:
            prepared.unwatch()
        await prepared.readable(fd)
        waited = True


async def _ready(loop: asyncio.AbstractEventLoop, fd: int, writing: bool) -> None:
    """Until the socket can be read (or, `writing`, read or written)."""
    woken: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not woken.done():
            woken.set_result(None)

    loop.add_reader(fd, wake)
    if writing:
        loop.add_writer(fd, wake)
    try:
        await woken
    finally:
        loop.remove_reader(fd)
        if writing:
            loop.remove_writer(fd)
