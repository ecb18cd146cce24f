"""Following a run's timeline as it changes (`GET /v1/runs/{id}/events`): its status changes, and each
attempt and step that is new or changed, until the run ends.

A status change wakes the follower at once (the LISTEN channel `ticketiq_runs` of `run_events.py`).
Steps and calls change without one, and no NOTIFY is sent per checkpoint statement on purpose: a NOTIFY
takes a global lock at commit and would slow every run, followed or not. So while a follower is
connected it also looks every `LOOK_S` at where the run's timeline stands (one small indexed read,
`TimelineStore.position`) and reads the timeline again only when that moved.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection
from typing import Any, Protocol

from ticketiq.storage.timeline_store import TimelineStore
from ticketiq.views import timeline
from ticketiq.views.run_events import RunEvents

LOOK_S = 0.5


class Followed(Protocol):
    """What a follower reads (`RunViews`)."""

    events: RunEvents | None
    timeline_store: TimelineStore

    async def timeline(self, run_id: str, scope: str | None) -> dict[str, Any] | None: ...


async def follow(
    views: Followed, run_id: str, scope: str | None, terminal: Collection[str]
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """(event, data) pairs: `status`, `attempt`, `step` as they change, and `end` once the run is in a
    `terminal` status (then it stops). Nothing when the run is not there for `scope` (`RunViews.timeline`)."""
    with contextlib.ExitStack() as stack:
        # Registered before the first read, so no change between that read and the wait goes unseen.
        follower = stack.enter_context(views.events.following(run_id)) if views.events else None
        shown: dict[str, Any] | None = None
        stood: tuple[Any, ...] | None = None
        while True:
            stands = await views.timeline_store.position(run_id)
            if stands is None:
                return
            if stands != stood:
                now = await views.timeline(run_id, scope)
                if now is None:
                    return
                for event in timeline.changes(shown, now):
                    yield event
                shown, stood = now, stands
                if now["run"]["status"] in terminal:
                    yield timeline.end(now["run"])
                    return
            if follower is not None:
                await follower.wait(LOOK_S)
            else:
                await asyncio.sleep(LOOK_S)
