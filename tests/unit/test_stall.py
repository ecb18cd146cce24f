"""The stall watch (ticketiq/runtime/stall.py): a process that did not run for longer than a lease can outlive
stops at its next statement or request; a shorter pause changes nothing."""

from __future__ import annotations

import asyncio
import time

import pytest

from ticketiq.runtime import stall


class Stops:
    def __init__(self) -> None:
        self.seen: list[tuple[float, float]] = []

    def __call__(self, gap_s: float, limit_s: float) -> None:
        self.seen.append((gap_s, limit_s))


def test_the_limit_is_the_shortest_stall_that_can_lose_a_lease() -> None:
    assert stall.limit_for(8.0, 2.0) == 6.0
    assert stall.limit_for(4.0, 1.0) == 3.0
    assert stall.limit_for(1.0, 1.0) == pytest.approx(10 * stall.TICK_S)  # never below a second


def test_a_pause_under_the_limit_changes_nothing() -> None:
    stops = Stops()
    watch = stall.Watch(6.0, on_stall=stops)
    watch.last = time.monotonic() - 5.5
    watch.check()
    assert stops.seen == [] and watch.gap_s is None


def test_a_stall_past_the_limit_stops_the_first_statement_and_every_later_one() -> None:
    stops = Stops()
    watch = stall.Watch(6.0, on_stall=stops)
    watch.last = time.monotonic() - 7.0
    with pytest.raises(stall.Stalled, match=r"stalled 7\.0 s, over the 6\.0 s"):
        watch.check()
    watch.last = time.monotonic()  # a tick that ran after the stall does not make it good again
    with pytest.raises(stall.Stalled):
        watch.check()
    assert len(stops.seen) == 2 and stops.seen[0][1] == 6.0 and stops.seen[0][0] >= 7.0


async def test_the_tick_sees_a_frozen_event_loop() -> None:
    stops = Stops()
    watch = stall.Watch(0.3, on_stall=stops)
    task = asyncio.create_task(watch.run())
    await asyncio.sleep(0.25)
    assert stops.seen == []
    time.sleep(0.5)  # noqa: ASYNC251 (the loop itself is frozen, as SIGSTOP or a blocking call freezes it)
    with pytest.raises(stall.Stalled):
        await task
    assert stops.seen and stops.seen[0][0] >= 0.5


def test_the_module_check_uses_the_process_watch_only_when_one_is_installed() -> None:
    stall.check()  # no watch: in-process tests and tools run unguarded
    stops = Stops()
    watch = stall.Watch(1.0, on_stall=stops)
    watch.last = time.monotonic() - 2.0
    stall.watch(watch)
    try:
        with pytest.raises(stall.Stalled):
            stall.check()
    finally:
        stall.watch(None)
    stall.check()
