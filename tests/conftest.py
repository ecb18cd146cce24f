from __future__ import annotations

import gc
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType

import pytest
from hypothesis import HealthCheck, settings

from tests.support import order, postgres, preforked
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

# Hypothesis's timing checks off: on a shared 2-core machine running six workers, one draw can wait a second
# for a core, which says nothing about the strategy (the suite asserts behaviour, never time).
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")

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


# Under pytest-xdist (`make test`) the longest tests go out first, so that none starts last and keeps the
# suite waiting on it alone: the kill trials (when opted into, as `make test` runs their smoke), then those
# marked `long` (10 s or more on a 2-core machine), one to the front of each worker's first block
# (tests/support/order.py). The rest keep pytest-randomly's shuffled order of modules, so the tests that
# start processes are spread over the run rather than bunched, except the unit tests, which go last: a
# worker that runs out steals from the back of another's block. The sort is stable and the same on every
# worker.
def _rank(item: pytest.Item) -> int:
    if item.path.name == "test_kill_trials.py":
        return 0
    if item.get_closest_marker("long") is not None:
        return 1
    return 3 if item.path.parent.name == "unit" else 2


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = getattr(config, "workerinput", {}).get("workercount", 1)
    ranked = sorted(items, key=_rank)
    leads = [item for item in ranked if _rank(item) < 2]
    items[:] = order.dealt(leads, ranked[len(leads) :], workers)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection made (the package, every test module, their libraries) lives as long as the session:
    frozen, the garbage collector no longer scans it at each full collection, as `ticketiq serve` does with
    what its start-up made (runtime/interpreter.py)."""
    gc.collect()
    gc.freeze()
