"""A run's events (`GET /v1/runs/{id}/events`, Server-Sent Events) as the client tells them, and when a
stream that closed is followed again: pure, the shells read the stream (httpx-sse) and sleep.

A stream tells `status`, `attempt` and `step` as they change and a last `end`, then closes. One that closes
before its `end` (its time was up: TICKETIQ_STREAM_MAX_S) is followed on from the id of its last event
(`Last-Event-ID`), after the `retry` it gave: nothing told before is told again. One cut (its process died,
the edge dropped it, a read waited past `EVENTS_READ_S`) is followed again after a backoff, a bounded number
of times in a row. A 204 says the follower was told the end already.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from httpx_sse import ServerSentEvent

from ticketiq.client.retries import RetryPolicy, backoff_s

# The stream is quiet between changes; the server pings every 15 s, so a read that waits longer than this
# lost its process (or the edge).
EVENTS_READ_S = 45.0
RECONNECT_S = 1.0


@dataclass(frozen=True)
class RunEvent:
    """One event: `event` (status, attempt, step, end, ...), its `data`, and the `id` to follow on from."""

    event: str
    data: dict[str, Any]
    id: str | None = None


@dataclass
class Told:
    """How far a stream told, and how it ended: `ended` (it told `end`), `all_told` (204: told before),
    `cut` (broken, not closed)."""

    last_id: str | None = None
    retry_s: float = RECONNECT_S
    ended: bool = False
    all_told: bool = False
    cut: bool = False

    def heard(self, sse: ServerSentEvent) -> RunEvent | None:
        """The event of one SSE message, noting its id and retry; None for a message that tells nothing."""
        self.last_id = sse.id or self.last_id
        if sse.retry is not None:
            self.retry_s = sse.retry / 1000
        if not sse.data and sse.event in ("", "message"):  # httpx-sse names an event without a name `message`
            return None
        try:
            data = json.loads(sse.data) if sse.data else {}
        except ValueError:
            data = {"text": sse.data}
        event = RunEvent(sse.event or "message", data if isinstance(data, dict) else {"value": data}, self.last_id)
        if event.event == "end":
            self.ended = True
        return event


def follow_again_s(told: Told, failures: int, policy: RetryPolicy, jitter: float) -> float | None:
    """The pause before following the run again after a stream ended as `told` says, `failures` streams in a
    row having been cut or refused (0: this one closed cleanly); None: no more to follow, or too many
    failures (the caller raises the last)."""
    if told.ended or told.all_told:
        return None
    if failures == 0:
        return told.retry_s
    if failures >= policy.attempts:
        return None
    return backoff_s(policy, failures - 1, None, jitter)
