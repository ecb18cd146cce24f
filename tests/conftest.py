from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.support import postgres
from ticketiq.storage.database import Database


@pytest.fixture(scope="session")
def pg() -> Iterator[postgres.SuitePostgres]:
    yield from postgres.start()


@pytest.fixture
def db_url(pg: postgres.SuitePostgres) -> Iterator[str]:
    url = pg.fresh_database()
    try:
        yield url
    finally:
        pg.drop(url)


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url, min_size=1, max_size=10)
    await database.open()
    try:
        yield database
    finally:
        await database.close()
