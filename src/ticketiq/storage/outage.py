"""When this process last lost its database and when it came back, and how soon to try again.

A failover (pg_auto_failover promoting the standby) looks to every process the same: each connection to
the old primary fails at once or goes silent, and for some seconds nothing takes writes; then the
multi-host URL finds the new primary. On the new primary no session state survived: every liveness
lock is free and every LISTEN is gone. What a process may conclude meanwhile:

- a lock found free shortly after the database came back says nothing about a process's death: every
  process is re-taking its own mark at that moment. The leader's sweep therefore waits `grace_s` after
  its own database came back before it judges any process dead or any lease lapsed (`settling`), so
  the runs it then claims are spread over every process that re-took its mark, and none is judged
  dead for the failover alone;
- dedicated connections (liveness, renewals, listeners) reconnect with `backoff_s`: fast first, so a
  process is back within a fraction of a second of the primary, then no faster than `BACKOFF_CAP_S`,
  so a long outage costs the new primary no storm of connection attempts.

The tracker is told of failures by what sees them (the pool's statements, the liveness connection) and
of answers by the statements that then succeed; it reads no clock but the monotonic one.
"""

from __future__ import annotations

import random
import time

import psycopg

from ticketiq.errors import StorageError

BACKOFF_FIRST_S = 0.1
BACKOFF_CAP_S = 0.5

# SQLSTATEs that say the server went away rather than refused a statement: a connection failure (class
# 08), an administrator's or the server's shutdown (57P01-57P03), and a read-only server where a write
# was sent (25006: a standby, or a primary being demoted, answering under a multi-host URL).
_GONE_STATES = frozenset({"57P01", "57P02", "57P03", "25006"})


def backoff_s(tries: int, rng: random.Random | None = None) -> float:
    """How long to wait before try number `tries` + 1 (the first retry waits about BACKOFF_FIRST_S),
    doubling up to BACKOFF_CAP_S, with up to a quarter of jitter so processes do not retry in step."""
    base = min(BACKOFF_CAP_S, BACKOFF_FIRST_S * 2.0 ** max(0, tries))
    draw: float = (rng or random).random()
    return base * (0.75 + 0.25 * draw)


def server_gone(exc: BaseException) -> bool:
    """Whether a failure says the database (not the statement) failed: no answer at all, a connection
    error, a shutdown, or a read-only server."""
    if isinstance(exc, StorageError):
        return exc.retryable and (exc.sqlstate is None or exc.sqlstate[:2] == "08" or exc.sqlstate in _GONE_STATES)
    if isinstance(exc, psycopg.Error):
        return exc.sqlstate is None or exc.sqlstate[:2] == "08" or exc.sqlstate in _GONE_STATES
    return isinstance(exc, OSError | TimeoutError)


class Outage:
    """This process's view of its database: down since when, back since when."""

    __slots__ = ("back_at", "down_since", "outages")

    def __init__(self) -> None:
        self.down_since: float | None = None
        self.back_at: float | None = None
        self.outages = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException, now: float | None = None) -> None:
        """A failure seen; counted as an outage only when it says the server went away."""
        if self.down_since is None and server_gone(exc):
            self.down_since = time.monotonic() if now is None else now
            self.outages += 1

    def answered(self, now: float | None = None) -> None:
        """A statement answered: if the database was down, it is back now."""
        if self.down_since is not None:
            self.down_since = None
            self.back_at = time.monotonic() if now is None else now

    def settling(self, grace_s: float, now: float | None = None) -> bool:
        """Down, or back for less than `grace_s`: session state (liveness locks, LISTENs) is still being
        re-taken, and nothing read about it may be taken for a process's death."""
        if self.down_since is not None:
            return True
        if self.back_at is None:
            return False
        return (time.monotonic() if now is None else now) - self.back_at < grace_s
