"""Workflow runs' statements (`queries/workflows.sql`): the gate facts of a tool step, the step rows a
run wrote, and the parameters of its fenced statements (which the job's handle makes, `JobHandle.
step_begun`, `step_ended` and `in_flight_s` in job_store.py, so its attempt fences them, I3)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from ticketiq.errors import StorageError
from ticketiq.storage.database import Database
from ticketiq.storage.rows import GateFacts, row_as

CHANNEL = "workflow"  # the channel gate's name for workflow runs: a person may disable it


@dataclass(frozen=True)
class StepRow:
    seq: int
    step_id: str
    kind: str
    tool: str | None
    agent: str | None
    key: str
    status: str
    args: Any
    output: Any
    error: str | None
    run_id: str | None
    settled: str | None
    attempt: int
    started_at: datetime
    ended_at: datetime | None


@dataclass(frozen=True)
class StepWrite:
    """What a fenced statement writes about one step execution."""

    seq: int
    step_id: str
    kind: str
    key: str
    status: str
    tool: str | None = None
    agent: str | None = None
    args: Any = None
    output: Any = None
    error: str | None = None
    run_id: str | None = None
    settled: str | None = None
    budget_s: float | None = None  # a write's in-doubt mark: how long it may be in flight (I14)

    def params(self, state: dict[str, Any], done: int | None = None) -> dict[str, Any]:
        """Every value as the statement binds it; JSON values (a step's output may be plain text or a
        number) as jsonb."""
        return {
            "state": Jsonb(state), "done": done, "seq": self.seq, "step_id": self.step_id, "kind": self.kind,
            "key": self.key, "status": self.status, "tool": self.tool, "agent": self.agent,
            "args": None if self.args is None else Jsonb(self.args),
            "output": None if self.output is None else Jsonb(self.output), "error": self.error,
            "run_id": self.run_id, "settled": self.settled, "budget": self.budget_s,
        }  # fmt: skip


class WorkflowStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def steps(self, job_id: str) -> list[StepRow]:
        return [row_as(StepRow, r) for r in await self.db.fetch_all("workflows.steps", {"job_id": job_id})]

    async def gate_facts(self, workflow: str, owner: str, tenant: str) -> GateFacts:
        row = await self.db.fetch_one("workflows.gate_facts", {"owner": owner, "tenant": tenant, "channel": CHANNEL})
        if row is None:  # a SELECT without FROM always answers one row
            raise StorageError("reading a workflow step's gate facts answered no row", retryable=False)
        return GateFacts(
            agent=f"workflow {workflow}", tenant=tenant, owner=owner, channel=CHANNEL, may_wait=False,
            tenant_quarantine=row["tenant_quarantine"], channel_enabled=row["channel_enabled"],
            owner_may_run=row["owner_may_run"], granted=frozenset(row["granted"]),
            needs_approval=frozenset(row["needs_approval"]),
        )  # fmt: skip
