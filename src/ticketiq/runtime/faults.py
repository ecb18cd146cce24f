"""Fault injection for tests and kill trials: off unless TICKETIQ_FAULT_POINT names a point.

At the named point the process kills itself with SIGKILL, as the kernel's OOM killer or an operator
would: no cleanup, no flush, its connections dropped by the OS. Or, with `stop`, it freezes itself with
SIGSTOP, as a paused VM or an operator would, until someone sends it SIGCONT: its connections stay open
and it goes on where it stopped. Never set this in production.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

POINTS = frozenset(
    {
        "after_checkpoint",  # the checkpoint is written, no call made yet
        "after_mark",  # a write is marked in doubt, not yet sent
        "after_send",  # the vendor answered, the outcome not yet recorded
        "before_answer",  # the last step is done, the answer not yet kept
        "before_hand_on",  # the answer is kept (the run is `answered`), not yet handed on (I12)
        "before_write",  # a request's connection is ready, its last check (I3, I14) and first byte next
    }
)


class Faults:
    def __init__(self, point: str | None, after: int = 1, stop: bool = False) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {sorted(POINTS)}")
        self.point = point
        self.after = after
        self.stop = stop  # SIGSTOP rather than SIGKILL: frozen, then let go on by whoever sends SIGCONT
        self.seen = 0

    def hit(self, point: str) -> None:
        if point != self.point:
            return
        self.seen += 1
        if self.seen == self.after and self.stop:
            log.critical("fault injection: stopping this process at %s", point)
            os.kill(os.getpid(), signal.SIGSTOP)  # returns once it is let go on
        elif self.seen >= self.after and not self.stop:
            log.critical("fault injection: killing this process at %s", point)
            os.kill(os.getpid(), signal.SIGKILL)
