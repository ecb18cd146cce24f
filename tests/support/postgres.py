"""The test suite's Postgres: TICKETIQ_DATABASE_URL when set, else an embedded server in a temp home.

Each test gets a fresh database cloned from a migrated template, so tests never see each other's rows.
The embedded server keeps its port in its home (`server.home`, outside pytest's temporary root): an app
process run with that home as TICKETIQ_HOME knows the suite's URLs for its home's server, watches it and
starts it again if it is killed (the kill trials' `db` mode).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from ticketiq.storage import embedded
from ticketiq.storage.migrate import migrate

_counter = itertools.count()


def _with_database(url: str, name: str) -> str:
    base, _, _query = url.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{name}"


@dataclass
class SuitePostgres:
    admin_url: str
    server: embedded.EmbeddedServer | None = None
    template: str = field(default_factory=lambda: f"tq_template_{os.getpid()}")
    created: list[str] = field(default_factory=list)

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
            finally:
                await aconn.close()

        asyncio.run(run())

    def fresh_database(self) -> str:
        name = f"tq_test_{os.getpid()}_{next(_counter)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {self.template}")
        self.created.append(name)
        return self.url(name)

    def drop(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if name in self.created:
            self.created.remove(name)

    def close(self) -> None:
        for name in list(self.created):
            self.drop(self.url(name))
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.template} WITH (FORCE)")
        if self.server is not None:
            embedded.stop(self.server.home)


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
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-pg-") as home:
        server = embedded.acquire(Path(home))
        pg = SuitePostgres(admin_url=server.url(), server=server)
        try:
            pg.prepare_template()
            yield pg
        finally:
            pg.close()
