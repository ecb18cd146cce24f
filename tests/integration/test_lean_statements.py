"""`Database.execute`, `fetch_one` and `fetch_all` on libpq itself (storage/lean.py): the count it
answers, the rows as psycopg's cursor would load them, errors as psycopg's, a parameter larger than a
socket's buffer, and a connection interrupted mid-statement never handed out again with its answer
still on the way."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import psycopg
import pytest
import uvloop

from tests.support.tcp_proxy import TcpProxy
from ticketiq.errors import StorageError
from ticketiq.storage import database, lean
from ticketiq.storage.database import ConnectionLimits, Database
from ticketiq.storage.queries import QUERIES

STATEMENTS = {
    "lean_test.put": "INSERT INTO lean_probe (id, body) VALUES (%(id)s, %(body)s)",
    "lean_test.touch": "UPDATE lean_probe SET hits = hits + 1 WHERE id = %(id)s OR id = %(id)s + %(plus)s",
    "lean_test.sleep": "SELECT 1 FROM pg_sleep(%(s)s)",
    "lean_test.series": "SELECT n FROM generate_series(1, %(n)s) AS n",
    "lean_test.like": "SELECT 1 FROM lean_probe WHERE body LIKE 'x%%' AND id = %(id)s",
    "lean_test.kinds": (
        "SELECT n, n %% 2 = 0 AS even, n::numeric / 3 AS third, md5(n::text)::uuid AS id,"
        " jsonb_build_object('n', n, 'list', jsonb_build_array(n, %(note)s::text, NULL)) AS doc,"
        " %(note)s::text AS note, NULL::text AS nothing, ARRAY[n, n + 1] AS pair,"
        " timestamptz '2026-12-07 10:00+00' + n * interval '1 day' AS at, %(doc)s::jsonb AS given,"
        " 'é' || n AS accented FROM generate_series(1, %(n)s) AS n ORDER BY n"
    ),
}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, text in STATEMENTS.items():
        monkeypatch.setitem(QUERIES, name, text)
    yield
    for name in STATEMENTS:
        database._POSITIONAL.pop(name, None)


@pytest.fixture
async def one(db_url: str, statements: None) -> AsyncIterator[Database]:
    """A pool of one connection, and the probe table."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
        await admin.execute("CREATE TABLE lean_probe (id int PRIMARY KEY, body text, hits int NOT NULL DEFAULT 0)")
    db = Database(db_url, min_size=1, max_size=1)
    await db.open()
    try:
        yield db
    finally:
        await db.close()
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
            await admin.execute("DROP TABLE lean_probe")


async def backend(db: Database) -> int:
    """The server process of the pool's one connection."""
    async with db.pool.connection() as conn:
        cur = await conn.execute("SELECT pg_backend_pid() AS pid")
        found = await cur.fetchone()
        assert found is not None
        return int(found["pid"])


async def test_it_answers_how_many_rows_matched(one: Database) -> None:
    assert await one.execute("lean_test.put", {"id": 1, "body": "xa"}) == 1
    assert await one.execute("lean_test.put", {"id": 2, "body": "ya"}) == 1
    assert await one.execute("lean_test.touch", {"id": 1, "plus": 1}) == 2
    assert await one.execute("lean_test.touch", {"id": 7, "plus": 0}) == 0
    assert await one.execute("lean_test.series", {"n": 5}) == 5
    assert await one.execute("lean_test.like", {"id": 1}) == 1  # the literal % reached the server as one
    assert await one.execute("lean_test.like", {"id": 2}) == 0
    # A parameter whose type changes (an int past 32 bits) is prepared again for its types, not refused.
    assert await one.execute("lean_test.series", {"n": 3}) == 3
    assert await one.execute("lean_test.touch", {"id": 1, "plus": 2**40}) == 1


async def test_rows_are_what_psycopgs_cursor_loads(one: Database) -> None:
    params = {"n": 3, "note": "a 'quoted' note", "doc": {"k": [1, "two", None]}}
    async with one.pool.connection() as conn:
        cur = await conn.execute(QUERIES["lean_test.kinds"], database._adapt(params))
        psycopgs = await cur.fetchall()
    rows = await one.fetch_all("lean_test.kinds", params)
    assert rows == psycopgs
    assert [type(v) for v in rows[0].values()] == [type(v) for v in psycopgs[0].values()]
    assert rows[1]["doc"] == {"n": 2, "list": [2, "a 'quoted' note", None]}
    assert rows[0]["given"] == {"k": [1, "two", None]}
    assert await one.fetch_one("lean_test.kinds", params) == psycopgs[0]  # the first row only
    assert watch_of(one).transformer.pgresult is None  # the rows are not kept by the idle connection


async def test_no_rows_and_no_result_set_are_none_and_empty(one: Database) -> None:
    assert await one.fetch_one("lean_test.series", {"n": 0}) is None
    assert await one.fetch_all("lean_test.series", {"n": 0}) == []
    assert await one.fetch_all("lean_test.put", {"id": 5, "body": "x"}) == []  # an INSERT gives no rows
    assert await one.fetch_one("lean_test.like", {"id": 5}) == {"?column?": 1}
    assert await one.fetch_all("lean_test.series", {"n": 3}) == [{"n": 1}, {"n": 2}, {"n": 3}]


async def test_a_fetchs_error_is_the_statements_and_a_cancelled_fetch_replaces_its_connection(
    one: Database,
) -> None:
    await one.execute("lean_test.put", {"id": 1, "body": "a"})
    pid = await backend(one)
    with pytest.raises(StorageError, match=r"in lean_test\.put: UniqueViolation"):
        await one.fetch_one("lean_test.put", {"id": 1, "body": "b"})
    assert await one.fetch_one("lean_test.series", {"n": 1}) == {"n": 1}
    assert await backend(one) == pid
    sleeping = asyncio.create_task(one.fetch_all("lean_test.sleep", {"s": 0.5}))
    await asyncio.sleep(0.1)
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    assert await one.fetch_all("lean_test.series", {"n": 2}) == [{"n": 1}, {"n": 2}]
    assert await backend(one) != pid


async def test_an_error_is_the_statements_and_the_connection_goes_on(one: Database) -> None:
    await one.execute("lean_test.put", {"id": 1, "body": "a"})
    pid = await backend(one)
    with pytest.raises(StorageError, match=r"in lean_test\.put: UniqueViolation") as raised:
        await one.execute("lean_test.put", {"id": 1, "body": "b"})
    assert raised.value.sqlstate == "23505"
    assert not raised.value.retryable
    assert await one.execute("lean_test.touch", {"id": 1, "plus": 0}) == 1
    assert await backend(one) == pid  # the same connection: it had read its whole answer


async def test_a_parameter_larger_than_the_sockets_buffer_is_written_whole(one: Database) -> None:
    body = "x" * (8 * 1024 * 1024)
    assert await one.execute("lean_test.put", {"id": 3, "body": body}) == 1
    async with one.pool.connection() as conn:
        cur = await conn.execute("SELECT length(body) AS n, md5(body) = md5(%s) AS same FROM lean_probe", (body,))
        assert await cur.fetchone() == {"n": len(body), "same": True}


async def test_a_statement_cancelled_midway_leaves_no_answer_for_the_next(one: Database) -> None:
    pid = await backend(one)
    sleeping = asyncio.create_task(one.execute("lean_test.sleep", {"s": 0.5}))
    await asyncio.sleep(0.1)
    sleeping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sleeping
    # The one connection was closed, not handed out with the sleep's row still coming: the next
    # statement reads its own answer, on a new backend.
    assert await one.execute("lean_test.series", {"n": 4}) == 4
    assert await backend(one) != pid


async def test_a_statement_with_no_answer_fails_in_its_bound_and_its_connection_is_replaced(
    db_url: str, proxy: TcpProxy, statements: None
) -> None:
    limits = ConnectionLimits(connect_timeout_s=2.0, statement_timeout_s=0.5, keepalive_s=5.0)
    db = Database(proxy.url(db_url), min_size=1, max_size=1, limits=limits)
    await db.open()
    try:
        assert await db.execute("lean_test.series", {"n": 2}) == 2
        proxy.pause()  # the server never hears the statement: only the client's bound can end it
        with pytest.raises(StorageError, match=r"no answer within 1\.5 s") as raised:
            async with asyncio.timeout(10):
                await db.execute("lean_test.series", {"n": 3})
        assert raised.value.retryable
        proxy.resume()
        assert await db.execute("lean_test.series", {"n": 4}) == 4
        assert proxy.accepted == 2  # the silent connection was replaced, never handed out again
    finally:
        await db.close()


async def test_the_servers_statement_timeout_is_a_retryable_error_on_the_same_connection(
    db_url: str, statements: None
) -> None:
    limits = ConnectionLimits(connect_timeout_s=2.0, statement_timeout_s=0.2, keepalive_s=0)
    db = Database(db_url, min_size=1, max_size=1, limits=limits)
    await db.open()
    try:
        pid = await backend(db)
        with pytest.raises(StorageError, match="QueryCanceled") as raised:
            await db.execute("lean_test.sleep", {"s": 3})
        assert raised.value.sqlstate == "57014"
        assert await db.execute("lean_test.series", {"n": 2}) == 2
        assert await backend(db) == pid
    finally:
        await db.close()


async def test_statements_deallocated_under_it_are_prepared_again(one: Database) -> None:
    pid = await backend(one)
    assert await one.execute("lean_test.series", {"n": 2}) == 2
    async with one.pool.connection() as conn:
        await conn.execute("DEALLOCATE ALL")
    assert await one.execute("lean_test.series", {"n": 3}) == 3
    assert await backend(one) == pid


async def test_psycopgs_own_deallocation_on_a_rollback_is_survived(one: Database) -> None:
    """psycopg deallocates every prepared statement of the connection, ours too, when it sees a ROLLBACK
    (its `_preparing.py`). A statement of ours prepared before is prepared again; one prepared after
    lives on. Names are never used twice on a connection, so neither collides with the other."""
    pid = await backend(one)
    for round in range(3):
        assert await one.execute("lean_test.put", {"id": round, "body": "x"}) == 1  # prepared (at round 0)
        with contextlib.suppress(RuntimeError):
            async with one.transaction() as tx:
                await tx.fetch_all("lean_test.series", {"n": 2})
                raise RuntimeError("rolled back")  # psycopg deallocates all after the ROLLBACK
        # Prepared after the deallocation: it lives on, while put's name is gone from the server.
        assert await one.fetch_all("lean_test.series", {"n": 2}) == [{"n": 1}, {"n": 2}]
        assert await one.execute("lean_test.put", {"id": 10 + round, "body": "x"}) == 1  # prepared again
        assert await one.fetch_one("lean_test.like", {"id": round}) == {"?column?": 1}  # new after it
        assert await one.execute("lean_test.touch", {"id": round, "plus": 0}) == 1
        assert await one.fetch_one("lean_test.kinds", {"n": 1, "note": "a", "doc": {}}) is not None
    assert await backend(one) == pid


async def test_a_connection_keeps_at_most_max_prepared_statements(
    one: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lean, "MAX_PREPARED", 3)
    pid = await backend(one)

    async def ours() -> list[str]:
        async with one.pool.connection() as conn:
            cur = await conn.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'tq\\_%%' ORDER BY name")
            return [str(r["name"]) for r in await cur.fetchall()]

    for round in range(2):
        assert await one.execute("lean_test.put", {"id": round, "body": "x"}) == 1
        assert await one.fetch_all("lean_test.series", {"n": 2}) == [{"n": 1}, {"n": 2}]
        assert await one.fetch_one("lean_test.like", {"id": round}) == {"?column?": 1}
        assert await one.execute("lean_test.touch", {"id": round, "plus": 0}) == 1  # the 4th: put's goes
        assert await one.fetch_one("lean_test.kinds", {"n": 1, "note": "a", "doc": {}}) is not None
        assert len(await ours()) == 3
    assert await ours() == sorted(n.decode() for n in watch_of(one).names.values())
    assert await backend(one) == pid


def watch_of(db: Database) -> lean.Prepared:
    """The pool's one connection's lean state (its statements and its socket's watch)."""
    (conn,) = db.pool._pool
    found = getattr(conn, "_lean", None)
    assert isinstance(found, lean.Prepared)
    return found


async def test_the_sockets_watch_stays_between_statements_and_comes_off_for_psycopgs_own(one: Database) -> None:
    await one.execute("lean_test.put", {"id": 1, "body": "x"})
    await one.execute("lean_test.sleep", {"s": 0.05})  # an answer that is waited for, surely
    watch = watch_of(one)
    assert watch.loop is asyncio.get_running_loop()  # kept: the next statement adds no reader
    # psycopg's own statement on the same connection adds its reader and removes it after: ours comes
    # off first, and the next statement of ours watches again (else it would wait for ever).
    assert await backend(one) > 0
    assert watch.loop is None
    assert await asyncio.wait_for(one.execute("lean_test.sleep", {"s": 0.05}), 10) == 1
    assert watch.loop is asyncio.get_running_loop()


async def test_a_connection_closes_with_its_socket_unwatched(one: Database) -> None:
    await one.execute("lean_test.sleep", {"s": 0.05})
    watch = watch_of(one)
    assert watch.loop is not None
    (conn,) = one.pool._pool
    fd = conn.pgconn.socket
    await conn.close()
    # The loop must never watch a closed descriptor: its number goes to the next socket opened.
    assert watch.loop is None
    assert not asyncio.get_running_loop().remove_reader(fd)


async def test_an_idle_connection_whose_server_hangs_up_takes_its_watch_off(one: Database, db_url: str) -> None:
    await one.execute("lean_test.put", {"id": 1, "body": "x"})
    watch = watch_of(one)
    pid = await backend(one)
    await one.execute("lean_test.sleep", {"s": 0.05})  # watched again, idle in the pool
    assert watch.loop is not None
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
        await admin.execute("SELECT pg_terminate_backend(%s)", [pid])
    # Readable with no statement waiting: left on, the loop would call it at every turn.
    for _ in range(100):
        if watch.loop is None:
            break
        await asyncio.sleep(0.02)
    assert watch.loop is None


def test_the_watch_behaves_the_same_on_uvloop(db_url: str, statements: None) -> None:
    """uvloop, which `ticketiq serve` runs on, calls a reader at once from its poll (asyncio's selector
    loop queues it): the three cases above, on it."""

    async def cases() -> None:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as admin:
            await admin.execute("CREATE TABLE lean_probe (id int PRIMARY KEY, body text, hits int NOT NULL DEFAULT 0)")
            db = Database(db_url, min_size=1, max_size=1)
            await db.open()
            try:
                await test_the_sockets_watch_stays_between_statements_and_comes_off_for_psycopgs_own(db)
                await admin.execute("DELETE FROM lean_probe")
                await test_an_idle_connection_whose_server_hangs_up_takes_its_watch_off(db, db_url)
                await admin.execute("DELETE FROM lean_probe")
                with contextlib.suppress(StorageError):  # the statement that finds its connection cut
                    await db.execute("lean_test.touch", {"id": 1, "plus": 0})
                await test_a_connection_closes_with_its_socket_unwatched(db)
            finally:
                await db.close()
                await admin.execute("DROP TABLE lean_probe")

    uvloop.run(cases())
