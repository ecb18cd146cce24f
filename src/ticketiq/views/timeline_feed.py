"""Following runs' timelines as they change (`GET /v1/runs/{id}/events`): one feed a process, however many
streams follow, each stream told from its own cursor (`timeline_cursor.py`).

The feed keeps, for each run a stream follows here, the run's timeline as last read and where it stood
(`TimelineStore.positions`), and reads a timeline again only when that moved: once for all its followers,
at most `READS_AT_ONCE` runs at a time, so following never holds more of the pool than that.

When it looks: a status change wakes it for that run at once (`ticketiq_runs`, heard on the process's one
listening connection and handed on by `run_events.py`). Steps and calls change without one: a NOTIFY per
checkpoint statement would take a global lock at commit and slow every run, followed or not. So the
followed runs that are running are looked at every `LOOK_S`, all of them in one statement; a run that waits
or is queued makes no step until its status changes, so it is looked at only every `QUIET_S` as a safety
net (`RECHECK_S` while the listener is down, when a status change would go unheard). No stream reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ticketiq.errors import StorageError
from ticketiq.runtime.background import cancelled
from ticketiq.storage.timeline_store import TimelineStore
from ticketiq.views import timeline_cursor
from ticketiq.views.follows import Follow
from ticketiq.views.run_events import LISTENING_RECHECK_S, RECHECK_S, RunEvents
from ticketiq.views.timeline_cursor import Cursor, Told

log = logging.getLogger(__name__)

LOOK_S = 0.5
QUIET_S = LISTENING_RECHECK_S
QUIET = frozenset({"waiting", "queued"})  # no step is made until the status changes
READS_AT_ONCE = 4

Batch = tuple[list[Told], Cursor]  # what a follower is told at once, and its cursor after it


class Read(Protocol):
    """What the feed reads (`RunViews`)."""

    timeline_store: TimelineStore

    async def timeline(self, run_id: str, scope: str | None) -> dict[str, Any] | None: ...


@dataclass
class Watched:
    """A run followed here, as the feed last read it."""

    followers: set[asyncio.Event] = field(default_factory=set)
    position: tuple[Any, ...] | None = None
    timeline: dict[str, Any] | None = None
    cursor: Cursor | None = None  # what all of `timeline` shows
    version: int = 0  # bumped at each new read
    gone: bool = False  # the run is not there
    looked_at: float = -math.inf
    woken: bool = True  # look at it at the next turn (new, or its status changed)

    @property
    def status(self) -> str | None:
        return None if self.timeline is None else str(self.timeline["run"]["status"])


def interval_s(status: str | None, listening: bool) -> float:
    """How long a followed run in `status` (None: not read yet) goes between two looks."""
    if status not in QUIET:
        return LOOK_S
    return QUIET_S if listening else RECHECK_S


def due(watched: Mapping[str, Watched], now: float, listening: bool) -> list[str]:
    """The followed runs to look at now."""
    return [run_id for run_id, w in watched.items()
            if not w.gone and (w.woken or now - w.looked_at >= interval_s(w.status, listening))]  # fmt: skip


def wait_s(watched: Mapping[str, Watched], now: float, listening: bool) -> float:
    """How long until a followed run is due (a wake-up may come sooner)."""
    left = (w.looked_at + interval_s(w.status, listening) - now for w in watched.values() if not w.gone)
    return max(0.0, min(left, default=QUIET_S))


class TimelineFeed:
    def __init__(
        self,
        views: Read,
        events: RunEvents | None,
        terminal: Collection[str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.views = views
        self.events = events
        self.terminal = terminal
        self.clock = clock
        self.looks = 0  # statements that read where the followed runs stand
        self.reads = 0  # timelines read
        self._watched: dict[str, Watched] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        if events is not None:
            events.also(self._heard, self._heard_all)

    def watched(self) -> int:
        return len(self._watched)

    def following(self, run_id: str) -> Following:
        """A follower of the run, registered now (so no change from here on goes unseen); close it when done
        (`follow` does)."""
        woken = asyncio.Event()
        return Following(self, run_id, self._watch(run_id, woken), woken)

    async def follow(self, following: Following, cursor: Cursor | None, until: Follow) -> AsyncIterator[Batch]:
        """Batches of (event, data) to tell a follower shown `cursor` (None: nothing yet), each with the
        cursor after it: `status`, `attempt`, `step` as they change and `end` once the run ended (then it
        stops). It stops too when the run is not there, when `until` is ended, or at its deadline; then the
        follower is closed."""
        watched, woken = following.watched, following.woken
        until.when_ended(woken.set)
        seen = 0
        try:
            while True:
                woken.clear()
                if watched.gone or until.ended.is_set():
                    return
                if watched.version != seen and watched.timeline is not None and watched.cursor is not None:
                    seen = watched.version
                    told = timeline_cursor.told(cursor, watched.cursor, watched.timeline, self.terminal)
                    if told:
                        cursor = timeline_cursor.after(watched.cursor, watched.timeline, self.terminal)
                        yield told, cursor
                    if cursor is not None and cursor.ended:
                        return
                    continue  # a newer read may have come while the batch was sent
                left = until.deadline - self.clock()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        await woken.wait()
        finally:
            following.close()

    async def stop(self) -> None:
        if self._task is not None:
            await cancelled(self._task)
            self._task = None

    def _watch(self, run_id: str, woken: asyncio.Event) -> Watched:
        watched = self._watched.get(run_id)
        if watched is None:
            watched = self._watched[run_id] = Watched()
            self._wake.set()
        watched.followers.add(woken)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="timeline-feed")
        return watched

    def _unwatch(self, run_id: str, woken: asyncio.Event) -> None:
        watched = self._watched.get(run_id)
        if watched is not None:
            watched.followers.discard(woken)
            if not watched.followers:
                del self._watched[run_id]

    def _heard(self, run_id: str) -> None:
        """The run's status changed (a notification): look at it now."""
        watched = self._watched.get(run_id)
        if watched is not None:
            watched.woken = True
            self._wake.set()

    def _heard_all(self) -> None:
        """The listener came or went: anything may have changed unheard."""
        for watched in self._watched.values():
            watched.woken = True
        self._wake.set()

    def _listening(self) -> bool:
        return self.events is not None and self.events.connected

    async def _run(self) -> None:
        while self._watched:
            try:
                looking = due(self._watched, self.clock(), self._listening())
                if looking:
                    await self._look(looking)
                    continue
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait_s(self._watched, self.clock(), self._listening())):
                        await self._wake.wait()
            except Exception:
                log.exception("the timeline feed failed a look at %d followed runs; looking again in %g s",
                              len(self._watched), RECHECK_S)  # fmt: skip
                await asyncio.sleep(RECHECK_S)

    async def _look(self, run_ids: list[str]) -> None:
        now = self.clock()
        for run_id in run_ids:
            self._watched[run_id].woken = False
            self._watched[run_id].looked_at = now
        try:
            stands = await self.views.timeline_store.positions(run_ids)
        except StorageError as exc:
            log.warning("could not look where %d followed runs stand (%s); looking again", len(run_ids), exc)
            return
        self.looks += 1
        moved = []
        for run_id in run_ids:
            watched = self._watched.get(run_id)
            if watched is None:
                continue
            stood = stands.get(run_id)
            if stood is None:
                watched.gone = True
                _tell(watched)
            elif stood != watched.position:
                moved.append((run_id, stood))
        if moved:
            reading = asyncio.Semaphore(READS_AT_ONCE)
            await asyncio.gather(*(self._read(run_id, stood, reading) for run_id, stood in moved))

    async def _read(self, run_id: str, stood: tuple[Any, ...], reading: asyncio.Semaphore) -> None:
        """Read the run's timeline, once for all its followers. Its position was read first: a change
        between the two moves the position again, and the next look reads again."""
        async with reading:
            try:
                now = await self.views.timeline(run_id, None)  # each follower was shown the run when it began
            except StorageError as exc:
                log.warning("could not read the timeline of run %s for its followers (%s); reading again", run_id, exc)
                return
        self.reads += 1
        watched = self._watched.get(run_id)
        if watched is None:
            return
        if now is None:
            watched.gone = True
        else:
            watched.position, watched.timeline, watched.cursor = stood, now, timeline_cursor.shown(now)
            watched.version += 1
        _tell(watched)


class Following:
    """One follower's registration with the feed."""

    def __init__(self, feed: TimelineFeed, run_id: str, watched: Watched, woken: asyncio.Event) -> None:
        self.feed = feed
        self.run_id = run_id
        self.watched = watched
        self.woken = woken
        self._closed = False

    async def first(self, within_s: float) -> dict[str, Any] | None:
        """The run's timeline as the feed read it (read now, once for every follower, if it had not been):
        what a new follower is shown, and whom it shows the run to. None: there is no such run. A
        StorageError when it could not be read within `within_s`."""
        try:
            async with asyncio.timeout(within_s):
                while self.watched.timeline is None and not self.watched.gone:
                    self.woken.clear()
                    if self.watched.timeline is None and not self.watched.gone:
                        await self.woken.wait()
        except TimeoutError:
            raise StorageError(f"run {self.run_id} could not be read within {within_s:g} s") from None
        return None if self.watched.gone else self.watched.timeline

    def close(self) -> None:
        """Done following (once; again is nothing): the run is forgotten with its last follower."""
        if not self._closed:
            self._closed = True
            self.feed._unwatch(self.run_id, self.woken)


def _tell(watched: Watched) -> None:
    for woken in watched.followers:
        woken.set()
