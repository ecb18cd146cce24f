"""The cluster's decisions when an app process dies (operate/supervise.py): the backoff and the crash loop."""

from __future__ import annotations

import pytest

from ticketiq.operate.supervise import (
    CRASH_LOOP_DEATHS,
    MAX_DELAY_S,
    LeaveDown,
    Life,
    Restart,
    after_death,
    restart_line,
)


def lives(*spans: tuple[float, float | None]) -> list[Life]:
    return [Life(started, died) for started, died in spans]


def test_a_process_that_lived_a_while_starts_again_after_a_second() -> None:
    assert after_death(lives((0, 3600))) == Restart(1.0, 1)


def test_each_death_after_a_short_life_doubles_the_delay_up_to_30_s() -> None:
    # Deaths 61 s apart: never a crash loop, each after a life of 1 s.
    spans: list[tuple[float, float | None]] = []
    delays = []
    for i in range(8):
        start = i * 62.0
        spans.append((start, start + 1))
        decision = after_death(lives(*spans))
        assert isinstance(decision, Restart)
        delays.append(decision.delay_s)
    assert delays == [1, 2, 4, 8, 16, 30, 30, 30]
    assert max(delays) == MAX_DELAY_S


def test_a_long_life_starts_the_backoff_afresh() -> None:
    decision = after_death(lives((0, 1), (62, 63), (124, 125), (130, 400), (460, 461)))
    # The life before the last lasted 270 s: its death was the first of a new row (1 s), the last one the
    # second (2 s), not the fifth (16 s).
    assert decision == Restart(2.0, 1)


def test_five_deaths_within_a_minute_are_a_crash_loop_left_down() -> None:
    spans: list[tuple[float, float | None]] = [(t * 10.0, t * 10.0 + 2) for t in range(CRASH_LOOP_DEATHS)]
    assert after_death(lives(*spans[:-1])) == Restart(8.0, 4)
    assert after_death(lives(*spans)) == LeaveDown(5)


def test_deaths_older_than_a_minute_do_not_count_towards_a_crash_loop() -> None:
    spans: list[tuple[float, float | None]] = [(0, 1), (2, 3), (4, 5), (6, 7), (70, 71)]
    decision = after_death(lives(*spans))
    assert isinstance(decision, Restart)
    assert decision.deaths_in_window == 1


def test_a_life_still_running_is_no_death() -> None:
    with pytest.raises(ValueError, match="a life that ended"):
        after_death(lives((0, None)))


def test_the_lines_say_when_it_starts_again_or_that_it_is_left_down() -> None:
    again = restart_line("app2", 42, "was killed by SIGKILL", Restart(2.0, 2), "/tmp/app2.log")
    assert again.startswith("app2 (pid 42) was killed by SIGKILL; starting it again in 2 s (died 2 times within 60 s)")
    once = restart_line("app2", 42, "exited with code 1", Restart(1.0, 1), "/tmp/app2.log")
    assert "(died once within 60 s)" in once
    down = restart_line("app2", 42, "exited with code 1", LeaveDown(5), "/tmp/app2.log")
    assert "died 5 times within 60 s, a crash loop: it is left down (see /tmp/app2.log)" in down
