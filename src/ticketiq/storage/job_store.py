"""Background jobs: typed rows over `queries/jobs.sql`, the one place with statements about jobs.

A running job's statements are bound to `(job id, attempt)` here: a statement that matched no row
raises `JobLost` in one place (I3). Nothing here decides what a job does; `jobs/worker.py` drives them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ticketiq.jobs.kinds import JobLost
from ticketiq.storage.database import Database, Row
from ticketiq.storage.rows import row_as

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
STATUSES = ("queued", "running", *sorted(TERMINAL))


def job_lease(job_id: str) -> str:
    """The lease a running job is held by, in the `leases` table beside the runs' `checkpoint:<id>`."""
    return f"job:{job_id}"


@dataclass(frozen=True)
class JobRow:
    id: str
    kind: str
    params: dict[str, Any]
    status: str
    resumable: bool
    attempt: int
    losses: int
    state: dict[str, Any]
    progress_done: int
    progress_total: int | None
    result: dict[str, Any] | None
    error: str | None
    holder: str | None
    created_by: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    restarted_from: str | None


@dataclass(frozen=True)
class Swept:
    """A job the sweep took back from a process that died or stopped renewing its lease."""

    id: str
    kind: str
    status: str  # queued (again), interrupted, failed (loss limit), cancelled
    losses: int
    error: str | None
    why: str


@dataclass(frozen=True)
class HandedBack:
    id: str
    kind: str
    status: str  # queued (resumable), interrupted, cancelled


class JobStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def create(self, job_id: str, kind: str, params: Mapping[str, Any], resumable: bool, by: str) -> JobRow:
        row = await self.db.fetch_one("jobs.create", {
            "id": job_id, "kind": kind, "params": dict(params), "resumable": resumable, "by": by,
        })  # fmt: skip
        assert row is not None  # made now, or made before under the same derived id
        return row_as(JobRow, row)

    async def claim(self, holder: str, ttl_s: float, limit: int) -> list[JobRow]:
        """Take up to `limit` of the oldest queued jobs, each under a new attempt and lease `job:<id>`."""
        rows = await self.db.fetch_all("jobs.claim", {"holder": holder, "ttl": ttl_s, "limit": limit})
        return [row_as(JobRow, r) for r in rows]

    async def get(self, job_id: str) -> JobRow | None:
        row = await self.db.fetch_one("jobs.get", {"id": job_id})
        return None if row is None else row_as(JobRow, row)

    async def listed(self, status: str | None, kind: str | None, limit: int) -> list[JobRow]:
        rows = await self.db.fetch_all("jobs.list", {"status": status, "kind": kind, "limit": limit})
        return [row_as(JobRow, r) for r in rows]

    async def cancel(self, job_id: str, by: str) -> JobRow | None:
        """Cancel a queued job, or ask a running one to stop; None when it is not queued or running."""
        row = await self.db.fetch_one("jobs.cancel", {"id": job_id, "by": by})
        return None if row is None else row_as(JobRow, row)

    async def restart(self, job_id: str, new_id: str, by: str) -> JobRow | None:
        """A new queued job from an ended one; None when it is not interrupted, failed or cancelled, or
        was restarted already."""
        row = await self.db.fetch_one("jobs.restart", {"id": job_id, "new_id": new_id, "by": by})
        return None if row is None else row_as(JobRow, row)

    async def restarted_as(self, job_id: str) -> str | None:
        row = await self.db.fetch_one("jobs.restarted_as", {"id": job_id})
        return None if row is None else str(row["id"])

    async def hand_back(self, holder: str, held: list[tuple[str, int]]) -> list[HandedBack]:
        """A clean stop's hand-back of the jobs it ran, each under the attempt it held."""
        if not held:
            return []
        rows = await self.db.fetch_all("jobs.hand_back", {
            "holder": holder, "held": [{"job_id": job_id, "attempt": attempt} for job_id, attempt in held],
        })  # fmt: skip
        return [row_as(HandedBack, r) for r in rows]

    async def unclaim(self, claimed: list[tuple[str, int]]) -> int:
        """Queue again jobs claimed under these attempts and never started; return how many."""
        if not claimed:
            return 0
        held = [{"job_id": job_id, "attempt": attempt} for job_id, attempt in claimed]
        return len(await self.db.fetch_all("jobs.unclaim", {"held": held}))

    async def sweep(self, holder: str, max_losses: int, limit: int) -> list[Swept]:
        rows = await self.db.fetch_all("jobs.sweep", {"holder": holder, "max_losses": max_losses, "limit": limit})
        return [row_as(Swept, r) for r in rows]

    def handle(self, job_id: str, attempt: int, holder: str) -> JobHandle:
        return JobHandle(self.db, job_id, attempt, holder)


class JobHandle:
    """The statements one attempt of a running job makes about itself, each fenced by the attempt (I3):
    one that matched nothing raises JobLost."""

    def __init__(self, db: Database, job_id: str, attempt: int, holder: str) -> None:
        self.db = db
        self.job_id = job_id
        self.attempt = attempt
        self.holder = holder

    def _fence(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return {**(params or {}), "job_id": self.job_id, "attempt": self.attempt, "holder": self.holder}

    async def save(self, state: Mapping[str, Any] | None, done: int | None, total: int | None) -> str | None:
        """Store state and progress; return who asked to cancel the job (None: no one)."""
        row = await self.db.fetch_one("jobs.save", self._fence({
            "state": None if state is None else dict(state), "done": done, "total": total,
        }))  # fmt: skip
        if row is None:
            raise JobLost(self.job_id, self.attempt, "saving its state" if state is not None else "reporting progress")
        by = row["cancel_requested_by"]
        return None if by is None else str(by)

    async def finish(self, status: str, result: Mapping[str, Any] | None, error: str | None) -> None:
        row = await self.db.fetch_one("jobs.finish", self._fence({
            "status": status, "result": None if result is None else dict(result), "error": error,
        }))  # fmt: skip
        if row is None:
            raise JobLost(self.job_id, self.attempt, f"ending {status}")

    async def fenced(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        """A kind's own statement; it fences itself on `job_id` and `attempt` and returns a row when it
        matched."""
        rows = await self.db.fetch_all(query, self._fence(params))
        if not rows:
            raise JobLost(self.job_id, self.attempt, f"running {query}")
        return rows
