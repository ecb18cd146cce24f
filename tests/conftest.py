from __future__ import annotations

import signal
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import pytest

from tests.support import postgres
from ticketiq.storage.database import Database


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a CI time-out, `timeout`) ends the session through its finalizers, so the servers and
    processes the tests started are stopped rather than left behind."""
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _exit_cleanly)


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
