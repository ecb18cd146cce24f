"""What `ticketiq cluster` does when an app process dies: start it again after a backoff, or, when it
keeps dying, leave it down and say so. Pure decisions over the times of its deaths; the cluster's
watch loop (`cluster.py`) does the starting and the printing.

The backoff starts at 1 s and doubles with each death that follows a short life, up to 30 s: a
process that lived a while before it died starts again after a second, one that dies as soon as it
is up waits longer each time. Five deaths within a minute are a crash loop: restarting it forever
would hide a broken release or setting behind a process that looks alive for a second at a time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
# A process that lived this long before it died starts the backoff afresh.
STEADY_S = 60.0
CRASH_LOOP_DEATHS = 5
CRASH_LOOP_WINDOW_S = 60.0


@dataclass(frozen=True)
class Life:
    """One process of a slot: when it started and, once it ended, when it died."""

    started: float
    died: float | None = None

    @property
    def lasted_s(self) -> float | None:
        return None if self.died is None else self.died - self.started


@dataclass(frozen=True)
class Restart:
    """Start the slot's process again `delay_s` after its death."""

    delay_s: float
    deaths_in_window: int


@dataclass(frozen=True)
class LeaveDown:
    """A crash loop: the slot stays down until an operator acts."""

    deaths_in_window: int


def after_death(lives: Sequence[Life]) -> Restart | LeaveDown:
    """What to do now that the last of `lives` (oldest first) died."""
    deaths = [life.died for life in lives if life.died is not None]
    if not deaths:
        raise ValueError("after_death needs a life that ended")
    last = deaths[-1]
    in_window = sum(1 for died in deaths if last - died < CRASH_LOOP_WINDOW_S)
    if in_window >= CRASH_LOOP_DEATHS:
        return LeaveDown(in_window)
    short = 0  # deaths in a row, newest first, each after a life shorter than STEADY_S
    for life in reversed(lives):
        lasted = life.lasted_s
        if lasted is None:
            continue
        short += 1
        if lasted >= STEADY_S:
            break
    return Restart(min(FIRST_DELAY_S * 2 ** (short - 1), MAX_DELAY_S), in_window)


def restart_line(name: str, pid: int, how: str, decision: Restart | LeaveDown, log: str) -> str:
    """What the cluster prints when an app process died on its own (`how`: "was killed by SIGKILL")."""
    if isinstance(decision, LeaveDown):
        return (f"{name} (pid {pid}) {how}; it died {decision.deaths_in_window} times within "
                f"{CRASH_LOOP_WINDOW_S:.0f} s, a crash loop: it is left down (see {log}); the edge sends "
                "its requests to the others")  # fmt: skip
    times = "once" if decision.deaths_in_window == 1 else f"{decision.deaths_in_window} times"
    return (f"{name} (pid {pid}) {how}; starting it again in {decision.delay_s:.0f} s (died {times} within "
            f"{CRASH_LOOP_WINDOW_S:.0f} s); meanwhile the edge sends its requests to the others")  # fmt: skip
