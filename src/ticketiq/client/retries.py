"""When a request is sent again, and after how long: pure, over plain values (the shells pass the clock and
the jitter in).

A request is sent again when nothing can come of it twice:
- it never reached the server (the connection was refused or not made in time): always;
- the server refused it unread: 429 (too many requests, streams or waits): always;
- 503 (the database is away), or the connection broke after the request went out: only when the request
  is `safe` to repeat, a read, or a POST carrying an Idempotency-Key (its repeat is answered as its first
  was: entries/idempotency.py), or one whose repeat changes nothing (a stop asked again);
- 409 with `Retry-After` to a keyed request: its first sending is still being answered.

Between tries: `Retry-After` when the server gave one (seconds or an HTTP date; never earlier than asked, up
to a tenth later so a crowd told the same time spreads), else an exponential backoff with jitter. A server
asking for a longer pause than `RetryPolicy.retry_after_max_s` is not retried: its answer is the caller's.
(model/client.py's `backoff_s` has the same shape, for the model's endpoint.)
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts`: tries in all, the first included (1: never sent again)."""

    attempts: int = 5
    base_s: float = 0.25
    cap_s: float = 8.0
    retry_after_max_s: float = 60.0


class Lost(enum.Enum):
    """How a request got no answer."""

    NOT_SENT = "not_sent"  # the connection was refused or not made: the server saw nothing
    CUT = "cut"  # the connection broke or timed out after the request went out: it may have been done


RETRIED_ALWAYS = frozenset({429})
RETRIED_WHEN_SAFE = frozenset({503})


def retry_after_s(value: str | None, now: datetime) -> float | None:
    """Seconds the server asked to wait (`Retry-After`: seconds or an HTTP date); None when unreadable."""
    if value is None:
        return None
    raw = value.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # an HTTP date is GMT by definition
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    return max(0.0, seconds) if math.isfinite(seconds) else None


def backoff_s(policy: RetryPolicy, retries_taken: int, asked_s: float | None, jitter: float) -> float | None:
    """How long to wait before retry number `retries_taken + 1`; `asked_s` the server's Retry-After; `jitter`
    in [0, 1). None: the server asked for a longer pause than the policy waits out."""
    if asked_s is not None:
        if asked_s > policy.retry_after_max_s:
            return None
        return asked_s * (1.0 + 0.1 * jitter)
    ceiling = min(policy.cap_s, policy.base_s * 2.0**retries_taken)
    return ceiling * (0.5 + 0.5 * jitter)


def retried(status: int | None, lost: Lost | None, safe: bool, keyed: bool, asked_s: float | None) -> bool:
    """Whether this outcome of a request is worth sending it again, whatever the count of tries."""
    if lost is Lost.NOT_SENT or status in RETRIED_ALWAYS:
        return True
    if lost is Lost.CUT or status in RETRIED_WHEN_SAFE:
        return safe
    return status == 409 and keyed and asked_s is not None


def delay_s(
    policy: RetryPolicy,
    tries: int,
    *,
    status: int | None = None,
    lost: Lost | None = None,
    safe: bool = False,
    keyed: bool = False,
    asked_s: float | None = None,
    jitter: float = 0.5,
) -> float | None:
    """The pause before sending again after try number `tries` (1 for the first) ended so; None: not again."""
    if tries >= policy.attempts or not retried(status, lost, safe, keyed, asked_s):
        return None
    return backoff_s(policy, tries - 1, asked_s, jitter)
