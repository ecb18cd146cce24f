"""A process that was not running for longer than its leases can outlive (SIGSTOP, a paused VM, an
event loop frozen by a blocking call) must not act on anything it knew before: another process has
taken its runs over. The fence (I3) already refuses every statement it would make about them and the
send window (I14) every write it would send; this watch goes further, so a stalled process writes
nothing at all, not even about itself: the first statement or outbound request it would make after the
stall stops the process instead (its supervisor starts a fresh one, under a fresh identity).

The gap is measured on the monotonic clock between ticks of a small task; whichever runs first after
the stall, the tick or a statement, sees the gap and stops the process. A stall shorter than the limit
(the lease TTL less one renewal interval: the shortest stall that can lose a lease) changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Callable

from ticketiq.runtime.background import cancelled

log = logging.getLogger(__name__)

EXIT_STALLED = 75  # EX_TEMPFAIL: start me again
TICK_S = 0.1


def limit_for(lease_ttl_s: float, lease_renew_s: float) -> float:
    """The shortest stall that can lose a lease: it began just before a renewal was due."""
    return max(TICK_S * 10, lease_ttl_s - lease_renew_s)


def stalled(gap_s: float, limit_s: float) -> bool:
    return gap_s > limit_s


def exit_now(gap_s: float, limit_s: float) -> None:
    log.critical(
        "this process did not run for %.1f s (over %.1f s: its leases may have lapsed and its runs been "
        "taken over); it stops here without another statement or request, to be started afresh", gap_s, limit_s,
    )  # fmt: skip
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stderr.flush()
    os._exit(EXIT_STALLED)  # no cleanup: handing leases back would itself be a write


class Watch:
    def __init__(self, limit_s: float, on_stall: Callable[[float, float], None] = exit_now) -> None:
        self.limit_s = limit_s
        self.on_stall = on_stall
        self.last = time.monotonic()
        self.gap_s: float | None = None  # latched: once stalled, stalled for good

    def check(self) -> None:
        """Before every statement and outbound request: stop if the process stalled past the limit."""
        gap = time.monotonic() - self.last
        if self.gap_s is None and stalled(gap, self.limit_s):
            self.gap_s = gap
        if self.gap_s is not None:
            self.on_stall(self.gap_s, self.limit_s)
            raise Stalled(self.gap_s, self.limit_s)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            self.check()
            self.last = time.monotonic()


class Stalled(RuntimeError):
    """Raised where the stall is seen, when `on_stall` did not end the process (tests)."""

    def __init__(self, gap_s: float, limit_s: float) -> None:
        super().__init__(f"stalled {gap_s:.1f} s, over the {limit_s:.1f} s a lease can outlive")


_active: Watch | None = None


def watch(w: Watch | None) -> None:
    """Make `w` this process's watch (None: no watch, as in tests that run engines in-process)."""
    global _active
    _active = w


def check() -> None:
    if _active is not None:
        _active.check()


async def before_request(request: object) -> None:
    """An httpx request hook: no outbound request from a stalled process."""
    check()


@contextlib.asynccontextmanager
async def watching(limit_s: float) -> AsyncIterator[Watch]:
    """This process's watch, ticking, for as long as the block runs (`ticketiq serve` only: an engine run
    in-process by a test shares its process with the test, and a stall there is the test's)."""
    w = Watch(limit_s)
    task = asyncio.create_task(w.run(), name="stall-watch")
    watch(w)
    try:
        yield w
    finally:
        watch(None)
        await cancelled(task)
