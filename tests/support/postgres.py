"""The test suite's Postgres: TICKETIQ_DATABASE_URL when set, else an embedded server in a temp home.

Each test gets a fresh database: a clone of a migrated template, or a database an earlier test gave back,
made the template's again and renamed (`reuse.py`: far cheaper for the server than a clone, and the
suite is CPU-bound), so tests never see each other's rows. A thread makes them ready ahead, while tests
run. The embedded server
keeps its port in its home (`server.home`, outside pytest's temporary root): an app process run with
that home as TICKETIQ_HOME knows the suite's URLs for its home's server, watches it and starts it again
if it is killed (the kill trials' `db` mode).

Under pytest-xdist each worker is its own session, so each has its own server (its own home, port,
template and databases): a test that kills the server, resets pg_stat_statements or looks for lock
waits in pg_stat_activity sees only its own worker's one test at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import itertools
import os
import queue
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.support.reuse import WATCH, Seed, end_sessions
from ticketiq.dbserver import embedded
from ticketiq.standins import records as standin_records
from ticketiq.storage.migrate import migrate

_counter = itertools.count()
# Databases made ready ahead of the tests that will take them.
SPARES = 2
# The suite's own server outlives no machine crash, so it need not survive one: WAL and data files are
# written but not flushed to disk. A killed postmaster (the kill trials' `db` mode) loses nothing by it:
# what a commit wrote is with the kernel, and recovery replays it as before.
_NO_FLUSH = {"fsync": "off", "full_page_writes": "off"}


def _with_database(url: str, name: str) -> str:
    base, _, _query = url.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{name}"


@dataclass
class SuitePostgres:
    admin_url: str = field(repr=False)  # with the password
    server: embedded.EmbeddedServer | None = None
    template: str = field(default_factory=lambda: f"tq_template_{os.getpid()}")
    seed: Seed | None = None
    created: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ready: queue.Queue[str] = field(default_factory=queue.Queue)
    _given_back: queue.Queue[str] = field(default_factory=queue.Queue)
    _closing: threading.Event = field(default_factory=threading.Event)
    _maker: threading.Thread | None = None

    def url(self, database: str) -> str:
        return _with_database(self.admin_url, database)

    def prepare_template(self) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {self.template}")

        async def run() -> None:
            aconn = await psycopg.AsyncConnection.connect(
                self.url(self.template), autocommit=True, row_factory=psycopg.rows.dict_row
            )
            try:
                await migrate(aconn)
                await aconn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                # The stand-ins' tables, as they make them at their start: a database is then the same
                # before and after a test whose stand-ins made them, and can be used again.
                async with aconn.transaction():
                    await standin_records.ensure_schema(aconn)
                await aconn.execute(WATCH)  # last: what made the template is no change
            finally:
                await aconn.close()

        asyncio.run(run())
        self.seed = Seed.of(self.url(self.template))
        self._maker = threading.Thread(target=self._keep_ready, name="spare-databases", daemon=True)
        self._maker.start()

    def _name(self) -> str:
        return f"tq_test_{os.getpid()}_{next(_counter)}"

    def _clone(self, admin: psycopg.Connection[tuple[object, ...]] | None = None) -> str:
        name = self._name()
        with contextlib.ExitStack() as stack:
            if admin is None:
                admin = stack.enter_context(psycopg.connect(self.admin_url, autocommit=True))
            # FILE_COPY copies the template's files (a checkpoint before and after); the default WAL_LOG writes
            # every block of them to the WAL, three times the work for a database this small.
            admin.execute(f"CREATE DATABASE {name} TEMPLATE {self.template} STRATEGY FILE_COPY")
        with self._lock:
            self.created.add(name)
        return name

    def made_fresh(self, name: str, admin: psycopg.Connection[tuple[object, ...]]) -> str | None:
        """The database a test gave back, as the template left it and under a new name (`reuse.py`); None
        when it cannot be (then it is dropped). `admin` is a connection to the server's own database."""
        assert self.seed is not None
        try:
            end_sessions(admin, name)
            with psycopg.connect(self.url(name), autocommit=True) as conn:
                conn.execute("SET lock_timeout = '5s'")
                if changed := self.seed.changed_by(conn):
                    raise ValueError(f"the test changed the schema of {name}: {', '.join(changed)}")
                self.seed.restore(conn)
            end_sessions(admin, name)
            fresh = self._name()
            admin.execute(f"ALTER DATABASE {name} RENAME TO {fresh}")
        except (psycopg.Error, ValueError, TimeoutError):
            self.drop(self.url(name), quietly=True)
            return None
        with self._lock:
            self.created.discard(name)
            self.created.add(fresh)
        return fresh

    def _keep_ready(self) -> None:
        """Make the databases given back fresh again, and keep SPARES ready beside them; a failed clone (the
        server killed by a test, restarting) is tried again."""
        # One connection to the server's own database for all of it, made again when it breaks (a test that
        # killed the server): a connection a database was a server backend started and ended, some 9 ms of
        # the server's CPU, for each of the suite's two thousand databases.
        admin: psycopg.Connection[tuple[object, ...]] | None = None
        while not self._closing.is_set():
            short = self._ready.qsize() < SPARES
            try:
                given = self._given_back.get(timeout=0.0 if short else 0.2)
            except queue.Empty:
                given = None
            if given is None and not short:
                continue
            try:
                if admin is None or admin.closed or admin.broken:
                    admin = psycopg.connect(self.admin_url, autocommit=True)
                if given is not None:
                    fresh = self.made_fresh(given, admin)
                    if fresh is not None:
                        self._ready.put(fresh)
                else:
                    self._ready.put(self._clone(admin))
            except psycopg.Error:
                if admin is not None:
                    admin.close()
                admin = None
                if given is not None:
                    self.drop(self.url(given), quietly=True)
                self._closing.wait(0.5)
        if admin is not None:
            admin.close()

    def fresh_database(self) -> str:
        try:
            name = self._ready.get_nowait()
        except queue.Empty:
            name = self._clone()
        return self.url(name)

    def give_back(self, url: str) -> None:
        """The test is done with the database: it is made fresh for another test, in the background."""
        self._given_back.put(url.rsplit("/", 1)[1])

    def drop(self, url: str, quietly: bool = False) -> None:
        name = url.rsplit("/", 1)[1]
        try:
            with psycopg.connect(self.admin_url, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        except psycopg.Error:
            if not quietly:
                raise
            return
        with self._lock:
            self.created.discard(name)

    def close(self) -> None:
        self._closing.set()
        if self._maker is not None:
            self._maker.join(timeout=60)
        with self._lock:
            left = list(self.created)
        for name in left:
            self.drop(self.url(name), quietly=True)
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")
        if self.server is not None:
            embedded.stop(self.server.home)


@contextlib.contextmanager
def _one_start_at_a_time() -> Iterator[None]:
    """xdist's workers start their servers one after another: each then finds the ports the others took
    in use, and the first creates the server's system user (as root) before the others look for it."""
    with open(Path(tempfile.gettempdir()) / "ticketiq-test-pg.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start() -> Iterator[SuitePostgres]:
    url = os.environ.get("TICKETIQ_DATABASE_URL")
    if url:
        pg = SuitePostgres(admin_url=url)
        pg.prepare_template()
        try:
            yield pg
        finally:
            pg.close()
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with tempfile.TemporaryDirectory(prefix=f"ticketiq-test-pg-{worker}-") as home:
        with _one_start_at_a_time():
            server = embedded.acquire(Path(home))
        pg = SuitePostgres(admin_url=server.url(), server=server)
        try:
            with psycopg.connect(pg.admin_url, autocommit=True) as conn:
                for name, value in _NO_FLUSH.items():
                    conn.execute(f"ALTER SYSTEM SET {name} = {value}")
                conn.execute("SELECT pg_reload_conf()")
            pg.prepare_template()
            yield pg
        finally:
            pg.close()
