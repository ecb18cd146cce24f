"""Background jobs: typed rows over `queries/jobs.sql`, the one place with statements about jobs.

A running job's statements are bound to `(job id, attempt)` here, its kind's own included (a source
sync's page, a red-team answer, a trained classifier, a fine-tune's in-doubt mark, a workflow's steps):
each is fenced by the job fence (`job_holds`, migration 025) and a statement that matched no row raises
`JobLost` in one place (`FencedHandle`, storage/fenced.py; I3). Nothing here decides what a job does;
`jobs/worker.py` drives them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ticketiq.errors import JobLost
from ticketiq.storage.database import Database, Row
from ticketiq.storage.fenced import FencedHandle
from ticketiq.storage.rows import row_as
from ticketiq.storage.workflow_store import StepWrite

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
        """The job made now, or the one made before under `job_id` once it is on the synchronous standby
        (I20)."""
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

    async def found(self, job_id: str) -> JobRow | None:
        """The job, made durable before it is returned (I20): for a request that answers "done already"
        from it. Any other read uses `get`, which writes nothing."""
        row = await self.db.fetch_one("jobs.found", {"id": job_id})
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
        """The job a restart of `job_id` made, once it is on the synchronous standby (I20)."""
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


@dataclass(frozen=True)
class PageWritten:
    """A source sync's page, written: how many issues it upserted, and whether a person asked to cancel."""

    written: int
    cancel_requested: bool


@dataclass(frozen=True)
class StepWritten:
    """A workflow step's row, written with the run's state: 1 when the row is the step's (0: the row at
    its seq holds another key), and who asked to cancel the job (None: no one)."""

    written: int
    cancel_requested_by: str | None


class JobHandle(FencedHandle):
    """The statements one attempt of a running job makes about itself, each fenced by the attempt (I3):
    one that matched nothing raises JobLost."""

    lost = JobLost

    def __init__(self, db: Database, job_id: str, attempt: int, holder: str) -> None:
        super().__init__(db, job_id, attempt)
        self.job_id = job_id
        self.holder = holder

    def _bound(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "attempt": self.attempt, "holder": self.holder}

    async def save(self, state: Mapping[str, Any] | None, done: int | None, total: int | None) -> str | None:
        """Store state and progress; return who asked to cancel the job (None: no one)."""
        row = await self._fenced("jobs.save", "saving its state" if state is not None else "reporting progress", {
            "state": None if state is None else dict(state), "done": done, "total": total,
        })  # fmt: skip
        by = row["cancel_requested_by"]
        return None if by is None else str(by)

    async def finish(self, status: str, result: Mapping[str, Any] | None, error: str | None) -> None:
        await self._fenced("jobs.finish", f"ending {status}", {
            "status": status, "result": None if result is None else dict(result), "error": error,
        })  # fmt: skip

    # ----- what the kinds write about their job (each ONE statement, fenced) -------------------------

    async def _kinds(self, name: str, params: Mapping[str, Any]) -> Row:
        """A kind's statement: the first row it returned (it returns one when the fence matched)."""
        return (await self._fenced_all(name, f"running {name}", params))[0]

    async def write_page(
        self, source: str, project: str, issues: list[dict[str, Any]], state: Mapping[str, Any], done: int,
        total: int | None,
    ) -> PageWritten:  # fmt: skip
        """A source sync's page of issues, upserted, with the cursor to the next page and the progress."""
        row = await self._kinds("knowledge.sync_page", {
            "source": source, "project": project, "issues": issues, "state": dict(state), "done": done,
            "total": total,
        })  # fmt: skip
        return PageWritten(int(row["written"]), bool(row["cancel_requested"]))

    async def record_answer(
        self, idx: int, agent: str, prompt: str, answer: str, asked_tools: Any, verdict: str
    ) -> None:
        """A red-team run's answer to one prompt."""
        await self._kinds("red_team.record_answer", {
            "idx": idx, "agent": agent, "prompt": prompt, "answer": answer, "asked_tools": asked_tools,
            "verdict": verdict,
        })  # fmt: skip

    async def record_classifier(
        self, classifier_id: str, project: str | None, classes: list[str], rows_trained: int, rows_held_out: int,
        accuracy: float | None, epochs: int, model: Mapping[str, Any],
    ) -> str:  # fmt: skip
        """A classifier training's model, written once at the end; returns its id."""
        row = await self._kinds("classifiers.record", {
            "id": classifier_id, "project": project, "classes": classes, "rows_trained": rows_trained,
            "rows_held_out": rows_held_out, "accuracy": accuracy, "epochs": epochs, "model": dict(model),
        })  # fmt: skip
        return str(row["id"])

    async def mark_in_doubt(
        self, state: Mapping[str, Any], what: str, budget_s: float, request_timeout_s: float
    ) -> dict[str, Any]:
        """I2, I14: the job's state with the request `what` marked in doubt until the latest moment it can
        be in flight (database clock); returns the state as stored."""
        row = await self._kinds("fine_tune.mark_in_doubt", {
            "state": dict(state), "what": what, "budget": budget_s, "request_timeout": request_timeout_s,
        })  # fmt: skip
        return dict(row["state"])

    async def clock(self) -> datetime:
        """I14: the database clock, which in-doubt marks are judged by; fenced, so a job taken over stops."""
        row = await self._kinds("fine_tune.clock", {})
        now: datetime = row["now"]
        return now

    async def step_begun(self, step: StepWrite, state: dict[str, Any]) -> StepWritten:
        """A workflow step about to take effect (a write marked in doubt, I2), with the run's state."""
        return _step_written(await self._kinds("workflows.step_begun", step.params(state)))

    async def step_ended(self, step: StepWrite, state: dict[str, Any], done: int) -> StepWritten:
        """A workflow step's outcome, with the state that moves past it and the progress."""
        return _step_written(await self._kinds("workflows.step_ended", step.params(state, done)))

    async def in_flight_s(self, seq: int, key: str) -> float:
        """I14: seconds (database clock) until the write marked for this step can no longer be in flight."""
        row = await self._kinds("workflows.in_flight_for", {"seq": seq, "key": key})
        return float(row["wait_s"])


def _step_written(row: Row) -> StepWritten:
    by = row["cancel_requested_by"]
    return StepWritten(int(row["written"]), None if by is None else str(by))
