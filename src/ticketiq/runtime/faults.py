"""Fault injection for tests and kill trials: off unless TICKETIQ_FAULT_POINT names a point.

At the named point the process kills itself with SIGKILL, as the kernel's OOM killer or an operator
would: no cleanup, no flush, its connections dropped by the OS. Never set this in production.
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
    }
)


class Faults:
    def __init__(self, point: str | None, after: int = 1) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"unknown fault point {point!r}; known: {sorted(POINTS)}")
        self.point = point
        self.after = after
        self.seen = 0

    def hit(self, point: str) -> None:
        if point != self.point:
            return
        self.seen += 1
        if self.seen >= self.after:
            log.critical("fault injection: killing this process at %s", point)
            os.kill(os.getpid(), signal.SIGKILL)
