"""A run's timeline as stored (`queries/timeline.sql`): its attempts, the audits of its takeovers, the
notes of its steps, its calls and approvals, and what still rides in its checkpoint; and where a
follower of the timeline stands. Only reads; `views/timeline.py` assembles them. And the queues
`GET /metrics` shows (`queries/metrics.sql`)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ticketiq.metrics import Gauges
from ticketiq.storage.database import Database
from ticketiq.storage.rows import row_as


@dataclass(frozen=True)
class AttemptRow:
    """One attempt (run_attempts, migration 023), every time on the database clock."""

    attempt: int
    process: str
    started_at: datetime
    first_at: datetime | None
    ended_at: datetime | None
    ended: str | None
    lost_detected_at: datetime | None


@dataclass(frozen=True)
class ResumedRow:
    """An `agent.run.crash_resumed` audit (I8): when it was written, and its detail."""

    at: datetime
    detail: dict[str, Any]


@dataclass(frozen=True)
class NoteRow:
    """A step's note; `at` is when its statement wrote it (None: it still rides in the checkpoint)."""

    at: datetime | None
    entry: dict[str, Any]


@dataclass(frozen=True)
class CallRow:
    step: int
    idx: int
    attempt: int
    tool: str
    cls: str
    step_key: str | None
    sent_key: str | None
    status: str
    outcome: Any
    settlement: str | None
    marked_at: datetime | None  # the database clock
    sent_at: datetime | None  # the sending process's wall clock
    outcome_at: datetime | None  # the recording process's wall clock


@dataclass(frozen=True)
class ApprovalRow:
    id: str
    step: int
    idx: int
    tool: str
    status: str
    created_at: datetime
    decided_at: datetime | None


@dataclass(frozen=True)
class TimelineRows:
    attempts: list[AttemptRow] = field(default_factory=list)
    resumed: list[ResumedRow] = field(default_factory=list)
    notes: list[NoteRow] = field(default_factory=list)
    calls: list[CallRow] = field(default_factory=list)
    pending_calls: list[dict[str, Any]] = field(default_factory=list)  # finished, riding in the checkpoint
    approvals: list[ApprovalRow] = field(default_factory=list)


class TimelineStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def read(self, run_id: str) -> TimelineRows:
        """Everything the timeline shows of one run (the run itself is the run store's)."""
        p = {"run_id": run_id}
        pending = await self.db.fetch_one("timeline.pending", p) or {"entries": [], "calls": []}
        notes = [row_as(NoteRow, r) for r in await self.db.fetch_all("timeline.step_notes", p)]
        notes += [NoteRow(None, e) for e in pending["entries"] if e.get("kind") in ("model_step", "model_answer")]
        calls = [
            CallRow(r["step"], r["idx"], r["attempt"], r["tool"], r["class"], r["step_key"], r["sent_key"],
                    r["status"], r["outcome"], r["settlement"], r["marked_at"], r["sent_at"], r["outcome_at"])
            for r in await self.db.fetch_all("timeline.calls", p)
        ]  # fmt: skip
        return TimelineRows(
            attempts=[row_as(AttemptRow, r) for r in await self.db.fetch_all("timeline.attempts", p)],
            resumed=[row_as(ResumedRow, r) for r in await self.db.fetch_all("timeline.resumed", p)],
            notes=notes,
            calls=calls,
            pending_calls=list(pending["calls"]),
            approvals=[row_as(ApprovalRow, r) for r in await self.db.fetch_all("timeline.approvals", p)],
        )

    async def attempts(self, run_id: str) -> list[AttemptRow]:
        """The run's attempts, oldest first (a takeover's trace names the one it took over from)."""
        return [row_as(AttemptRow, r) for r in await self.db.fetch_all("timeline.attempts", {"run_id": run_id})]

    async def positions(self, run_ids: Collection[str]) -> dict[str, tuple[Any, ...]]:
        """Where each run's timeline stands, in one statement: it changed when this did. A run that is not
        there is left out."""
        rows = await self.db.fetch_all("timeline.positions", {"run_ids": list(run_ids)})
        return {str(row.pop("run_id")): tuple(row.values()) for row in rows}

    async def gauges(self) -> Gauges:
        """Runs waiting, approvals pending, jobs queued, across the cluster, as of now."""
        row = await self.db.fetch_one("metrics.gauges")
        assert row is not None
        return Gauges(int(row["runs_waiting"]), int(row["approvals_pending"]), int(row["jobs_queued"]))
