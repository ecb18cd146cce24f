"""What people see of runs, read for the API, the console and A2A: a page of runs and their counts, one
run as `GET /v1/runs/{id}` shows it, its transcript, timeline and timeline feed, its status changes,
the processes, the audit log and the cluster's gauges. Reads only: what changes a run is the engine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ticketiq.auth import tokens
from ticketiq.engine import resume
from ticketiq.engine.engine import TERMINAL, Engine
from ticketiq.metrics import Gauges
from ticketiq.storage import synchrony
from ticketiq.storage.database import Database
from ticketiq.storage.process_store import ProcessStore
from ticketiq.storage.retention_store import RetentionStore
from ticketiq.storage.rows import AuditRow, LeftRun, RunRecord, RunStatus, TranscriptRow
from ticketiq.storage.run_list_store import RunListStore
from ticketiq.storage.run_store import RunStore
from ticketiq.storage.timeline_store import TimelineStore
from ticketiq.values import retention
from ticketiq.views import run_list, timeline
from ticketiq.views.follows import Follow
from ticketiq.views.run_events import RECHECK_S, RunEvents
from ticketiq.views.run_list import RunPage, RunQuery
from ticketiq.views.timeline_feed import TimelineFeed

ENDED_SHOWN = 20  # processes that ended, in `processes()`
LEFT_SHOWN = 100  # runs left for a newer release, in `processes()`


T = TypeVar("T")


@dataclass(frozen=True)
class Transcript:
    rows: list[TranscriptRow]
    pending: list[dict[str, object]]  # entries still riding in the checkpoint

    def body(self, run_id: str) -> dict[str, Any]:
        """As `GET /v1/runs/{id}/transcript` answers it."""
        return {
            "run_id": run_id,
            "entries": [entry for r in self.rows for entry in _expand(r)],
            # Written with the checkpoint, not yet to the transcript table (at most about a second).
            "pending": [{"kind": e["kind"], **e["body"]} for e in self.pending],  # type: ignore[dict-item]
        }


def _expand(row: TranscriptRow) -> list[dict[str, Any]]:
    """A transcript row holds one entry, or (kind `entries`) the several one statement wrote."""
    if row.kind == "entries":
        return [{"id": row.id, "at": row.at, "kind": e["kind"], **e["body"]} for e in row.body["entries"]]
    return [{"id": row.id, "at": row.at, "kind": row.kind, **row.body}]


class RunReads:
    """One run as the API shows it (the run, its transcript, its timeline), read from the database alone:
    what `RunViews` answers with, and what an export writes with no engine (`run_export.py`)."""

    def __init__(self, store: RunStore, db: Database) -> None:
        self.store = store
        self.db = db
        self.timeline_store = TimelineStore(db)

    async def _run(self, run_id: str, created_by: str | None) -> RunRecord | None:
        # As `Engine.get_run`: another token's run is not there for a scoped reader.
        run = await self.store.get(run_id)
        return run if run is not None and tokens.may_read(run.created_by, created_by) else None

    async def transcript(self, run_id: str, after: int, limit: int, created_by: str | None = None) -> Transcript | None:
        """The run's transcript; `created_by` scopes it as `Engine.get_run` does."""
        if created_by is not None:
            if await self._run(run_id, created_by) is None:
                return None
        elif await self.store.status(run_id) is None:
            return None
        rows = await self.store.transcript(run_id, after, limit)
        return Transcript(rows, await self.store.unflushed(run_id))

    async def shown_run(self, run_id: str, scope: str | None) -> dict[str, Any] | None:
        """The run as `GET /v1/runs/{id}` answers it, with what it waits for (I18); `scope` as `get_run`."""
        run = await self._run(run_id, scope)
        if run is None:
            return None
        waits = timeline.waited(await self.store.waiting_for(run_id)) if run.status == "waiting" else []
        newer = run.status not in TERMINAL and resume.format_unknown(run.state_format, run.seal_format) is not None
        if newer and await self.left_for_release(1, run_id):
            # A newer release's checkpoint, and no process of that release lives: it waits for one.
            waits = [timeline.waits_for_release(run.state_format, run.seal_format), *waits]
        return timeline.run_view(run, waits)

    async def left_for_release(self, limit: int, run_id: str | None = None) -> list[LeftRun]:
        """Runs no live process can resume: a newer release wrote their checkpoints (resume.format_unknown)."""
        known = (resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format)
        return await self.store.left_for_release(known, limit, run_id)

    async def timeline(self, run_id: str, scope: str | None) -> dict[str, Any] | None:
        """The run's timeline (`views/timeline.py`): {run, attempts, steps}; `scope` as `get_run`."""
        run = await self.shown_run(run_id, scope)
        return None if run is None else await self.timeline_of(run)

    async def timeline_of(self, run: dict[str, Any]) -> dict[str, Any]:
        """The timeline of a run read already (`shown_run`'s answer)."""
        return timeline.assemble(run, await self.timeline_store.read(str(run["id"])))


class RunViews(RunReads):
    def __init__(self, engine: Engine, events: RunEvents | None = None) -> None:
        super().__init__(engine.store, engine.deps.db)
        self.engine = engine
        # Wakes followers of a run when its status changes (None: they poll).
        self.events = events
        # What the event streams of this process follow, read once for all of them (`timeline_feed.py`).
        self.feed = TimelineFeed(self, events, TERMINAL)

    async def shown_when(
        self, run_id: str, scope: str | None, timeout_s: float, done: Callable[[str], bool], until: Follow | None
    ) -> dict[str, Any] | None:
        """The run as `shown_run` shows it once `done(its status)`, or when the timeout passed or `until`
        ended (a wait's follow: its credential ended); None when there is no such run. Each wake-up reads
        the run once, the read that is answered."""
        return await self._read_until(run_id, timeout_s, until, lambda: self.shown_run(run_id, scope),
                                      lambda shown: shown is None or done(shown["status"]))  # fmt: skip

    async def wait_change(
        self, run_id: str, timeout_s: float, seen: str | None = None, until: Follow | None = None
    ) -> RunStatus | None:
        """The run's status once it is other than `seen` (default: its status now), or when the timeout
        passed, or when `until` was ended (a long wait's slot, `follows.py`: its credential ended); None
        when there is no such run."""
        first: list[str | None] = [seen]

        def changed(now: RunStatus | None) -> bool:
            if now is not None and first[0] is None:
                first[0] = now.status  # the first read is what "changed" is measured from
                return now.status in TERMINAL
            return now is None or now.status != first[0] or now.status in TERMINAL

        return await self._read_until(run_id, timeout_s, until, lambda: self.store.status(run_id), changed)

    async def _read_until(
        self, run_id: str, timeout_s: float, until: Follow | None, read: Callable[[], Awaitable[T]],
        stop: Callable[[T], bool],
    ) -> T:  # fmt: skip
        """`read()` until `stop` says so, woken by the run's status changes (RECHECK_S apart with no
        listener), or until the timeout passed or `until` ended. Followed before the first read, so no
        change between that read and the wait goes unseen (a notification is a wake-up, never the truth)."""
        deadline = time.monotonic() + timeout_s
        with contextlib.ExitStack() as stack:
            follower = stack.enter_context(self.events.following(run_id)) if self.events else None
            if follower is not None and until is not None:
                until.when_ended(follower.event.set)
            found = await read()
            while not stop(found):
                left = deadline - time.monotonic()
                if left <= 0 or (until is not None and until.ended.is_set()):
                    break
                if follower is not None:
                    await follower.wait(left)
                else:
                    await asyncio.sleep(min(left, RECHECK_S))
                found = await read()
            return found

    async def list_runs(self, query: RunQuery, scope: str | None) -> RunPage:
        """A page of runs, newest first (`run_list.py`); `scope` reads one token's runs only (None: all)."""
        rows = await RunListStore(self.db).page(run_list.params(query, scope))
        return run_list.page(rows, query)

    async def run_counts(self, scope: str | None) -> dict[str, int]:
        """Runs by status, every status named (0 when none), scoped as `list_runs`: every run still going
        (queued, running, waiting, answered), and of the runs that ended, those made in the last day."""
        counted = await RunListStore(self.db).counts(scope)
        return {status: counted.get(status, 0) for status in run_list.STATUSES}

    async def processes(self) -> dict[str, Any]:
        """The live app processes, with what each holds, the last that ended, with how, and the last
        retention pass."""
        store = ProcessStore(self.db)
        return {"processes": [dict(row) for row in await store.live()],
                "ended": [dict(row) for row in await store.ended(ENDED_SHOWN)],
                "left_for_newer_release": [run.view() for run in await self.left_for_release(LEFT_SHOWN)],
                "database": (await synchrony.read(self.db)).view(),
                "retention": retention.last_pass_view(await RetentionStore(self.db, None).last_pass())}  # fmt: skip

    async def gauges(self) -> Gauges:
        """The cluster's queues for `GET /metrics` (waiting runs, pending approvals, queued jobs)."""
        return await self.timeline_store.gauges()

    async def audit_log(self, run_id: str | None, action: str | None, after: int, limit: int) -> list[AuditRow]:
        return await self.store.audit_log(run_id, action, after, limit)
