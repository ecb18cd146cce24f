"""Runs other processes gave this one: taken up and driven here.

The leader's claims and starts give each run's lease to the least loaded live process, in the one
statement that takes it (I5; migration 012). The process it went to hears of it on its liveness
connection (`ticketiq_handed`, naming it) and looks anyway every `check_s`, so a notification lost
costs one look, never the run. Taking up is one statement fenced by the attempt each run was given
under (I3): it renews the leases, and each run is taken up once and driven from its checkpoint. A
process that dies before it takes a run up never renews its lease: the lease lapses (or the process's
liveness mark is free) and the sweep claims the run again, so nothing is lost and no run has two
drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from ticketiq.runtime.background import Background

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)


class Handoffs:
    def __init__(self, engine: Engine, check_s: float) -> None:
        self.engine = engine
        self.check_s = check_s
        self.wake = asyncio.Event()
        self.taken_up = 0  # runs taken up, for tests and benchmarks
        self._stopping = False
        self._background = Background("handoffs", self.run)

    def heard(self) -> None:
        """A take gave this process a run (told on its liveness connection): look now."""
        self.wake.set()

    async def run(self) -> None:
        while not self._stopping:
            self.wake.clear()  # before the look: a run given while it is on its way wakes the next
            try:
                self.taken_up += await self.engine.take_up()
            except Exception:
                log.exception("taking up the runs given to this process failed; looking again")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.check_s):
                    await self.wake.wait()

    def start(self) -> None:
        self._background.start()

    async def stop(self, within_s: float = 5.0) -> None:
        """Stop looking, letting a look on its way end first: cut off mid-statement, the runs it took up
        would be driven by no one until their leases lapsed."""
        self._stopping = True
        self.wake.set()
        task = self._background.task
        if task is not None:
            await asyncio.wait([task], timeout=within_s)
        await self._background.stop()
