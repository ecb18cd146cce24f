from __future__ import annotations

import gc
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import pytest

from tests.support import postgres, preforked
from tests.support.engine import reads_kept
from tests.support.tcp_proxy import TcpProxy
from ticketiq.operate import launch
from ticketiq.storage.database import Database

# The one `standins` fixture (the stand-in servers in the test's loop), for every test that asks for it.
pytest_plugins = ["tests.support.standins"]


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (a CI time-out, `timeout`) ends the session through its finalizers, so the servers and
    processes the tests started are stopped rather than left behind."""
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, _exit_cleanly)

# `ticketiq serve` and `ticketiq standins` start from a fork server that imported them once.
launch.popen = preforked.popen


@pytest.fixture(scope="session")
def pg() -> Iterator[postgres.SuitePostgres]:
    yield from postgres.start()


@pytest.fixture
def db_url(pg: postgres.SuitePostgres) -> Iterator[str]:
    url = pg.fresh_database()
    try:
        yield url
    finally:
        pg.give_back(url)


@pytest.fixture(autouse=True)
async def kept_reads() -> AsyncIterator[None]:
    """Each test's `read_rows` on one connection a database (tests/support/engine.py), closed after it."""
    async with reads_kept():
        yield


@pytest.fixture
async def proxy(db_url: str) -> AsyncIterator[TcpProxy]:
    """A TCP relay in front of the test's Postgres, to pause, cut or silence connections through it.
    (tests/integration/test_tcp_proxy.py has its own, in front of an echo server.)"""
    proxied = await TcpProxy.before(db_url).start()
    try:
        yield proxied
    finally:
        await proxied.close()


@pytest.fixture
async def db(db_url: str) -> AsyncIterator[Database]:
    database = Database(db_url, min_size=1, max_size=10)
    await database.open()
    try:
        yield database
    finally:
        await database.close()


# Under pytest-xdist (`make test`) the slowest tests go out first, so that none starts last and keeps the
# suite waiting on it alone: the kill trials (when opted into, as `make test` runs their smoke), real
# processes killed and taken over, then browsers, then the rest. pytest-randomly's order is kept within
# each (the sort is stable, and the same on every worker).
_FIRST = {"acceptance": 0, "browser": 1, "integration": 2, "unit": 3}


def _rank(item: pytest.Item) -> int:
    if item.path.name == "test_kill_trials.py":
        return -1
    return _FIRST.get(item.path.parent.name, len(_FIRST))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the package, every test module, their libraries) lives as long as the session:
    frozen, the garbage collector no longer scans it at each full collection, as `ticketiq serve` does with
    what its start-up made (runtime/interpreter.py)."""
    gc.collect()
    gc.freeze()
