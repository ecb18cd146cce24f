"""Tells whoever follows a run (an A2A stream, a co-pilot caller, the timeline feed of the event streams)
that its status changed.

A trigger on `runs` notifies the run's id on `ticketiq_runs` whenever its status changes, on whichever
process made the change. The process hears it on its one listening connection, the gate watch's
(`engine/gate_watch.py`), which hands each id here. A follower waits for its run's next change or its
timeout, then reads the status itself: a notification is a wake-up, never the truth. While the
listener is not connected followers wake every `RECHECK_S` and read, so a lost notification costs at
most that long, never a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator

from ticketiq.engine.gate_watch import RUNS, GateWatch

CHANNEL = RUNS
RECHECK_S = 1.0
# Read even while listening: a notification sent while the listener was being re-made (a failover)
# is lost, and the reconnect's wake-up may race it.
LISTENING_RECHECK_S = 5.0


class Follower:
    def __init__(self, events: RunEvents) -> None:
        self.events = events
        self.event = asyncio.Event()

    async def wait(self, timeout_s: float) -> None:
        """Until the run's status may have changed since the last wait, or the timeout (at most
        RECHECK_S while the listener is down, LISTENING_RECHECK_S while it is up). The caller
        reads the status afterwards."""
        bound = min(timeout_s, LISTENING_RECHECK_S if self.events.connected else RECHECK_S)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(0.0, bound)):
                await self.event.wait()
        self.event.clear()


class RunEvents:
    def __init__(self, watch: GateWatch) -> None:
        """Fed by `watch` from now on: made before the watch starts, so its first LISTEN is seen here."""
        self.connected = False
        self.listens = 0  # LISTENs that succeeded
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._hearers: list[tuple[Callable[[str], None], Callable[[], None]]] = []
        watch.on_run = self._wake
        watch.on_listening = self._listening

    def also(self, on_run: Callable[[str], None], on_all: Callable[[], None]) -> None:
        """Tell `on_run` every run whose status changed, and `on_all` when the listener came or went (anything
        may have changed unheard): a follower of many runs at once (`timeline_feed.py`)."""
        self._hearers.append((on_run, on_all))

    @contextlib.contextmanager
    def following(self, run_id: str) -> Iterator[Follower]:
        """Follow a run: registered before the caller reads its status, so no change between that
        read and the wait goes unseen."""
        follower = Follower(self)
        self._waiters[run_id].add(follower.event)
        try:
            yield follower
        finally:
            waiters = self._waiters.get(run_id)
            if waiters is not None:
                waiters.discard(follower.event)
                if not waiters:
                    self._waiters.pop(run_id, None)

    def _listening(self, up: bool) -> None:
        self.connected = up
        if up:
            self.listens += 1
        self._wake_all()  # anything may have changed while no one listened, or may change unheard now

    def _wake(self, run_id: str) -> None:
        for event in self._waiters.get(run_id, ()):
            event.set()
        for on_run, _ in self._hearers:
            on_run(run_id)

    def _wake_all(self) -> None:
        for run_id in list(self._waiters):
            for event in self._waiters.get(run_id, ()):
                event.set()
        for _, on_all in self._hearers:
            on_all()
