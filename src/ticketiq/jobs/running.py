"""A claimed job as its kind's `run` sees it (`kinds.Job`): the row as claimed, and its statements,
each fenced by the attempt (I3) and refused once the job's lease is lost or its deadline passed."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.errors import JobLost, LeaseLost
from ticketiq.jobs.kinds import JobCancelled

if TYPE_CHECKING:
    from datetime import datetime

    import httpx

    from ticketiq.engine.engine import Engine
    from ticketiq.engine.leases import HeldLease
    from ticketiq.settings import Settings
    from ticketiq.storage.job_store import JobHandle, PageWritten, StepWritten
    from ticketiq.storage.knowledge_store import KnowledgeStore
    from ticketiq.storage.workflow_store import StepWrite, WorkflowStore


@dataclass(eq=False)
class RunningJob:
    id: str
    kind: str
    params: dict[str, Any]
    attempt: int
    losses: int
    state: dict[str, Any]
    created_by: str
    engine: Engine
    settings: Settings
    http: httpx.AsyncClient
    knowledge: KnowledgeStore
    workflows: WorkflowStore
    lease: HeldLease
    handle: JobHandle

    def check(self) -> None:
        """I3: raise JobLost once the lease is lost or its local deadline passed."""
        try:
            self.lease.check()
        except LeaseLost as exc:
            raise JobLost(self.id, self.attempt, f"its lease was lost ({exc.why})") from exc

    @property
    def lost(self) -> asyncio.Event:
        return self.lease.lost

    async def save(self, state: Mapping[str, Any], done: int | None = None, total: int | None = None) -> None:
        self.check()
        by = await self.handle.save(state, done, total)
        self.state = dict(state)
        if by is not None:
            raise JobCancelled(f"cancelled by {by} at {self._where(done, total)}")

    async def progress(self, done: int, total: int | None = None) -> None:
        self.check()
        by = await self.handle.save(None, done, total)
        if by is not None:
            raise JobCancelled(f"cancelled by {by} at {self._where(done, total)}")

    # Each kind's statements: checked first (no statement once the lease is lost), then fenced (I3).

    async def write_page(
        self, source: str, project: str, issues: list[dict[str, Any]], state: Mapping[str, Any], done: int,
        total: int | None,
    ) -> PageWritten:  # fmt: skip
        self.check()
        return await self.handle.write_page(source, project, issues, state, done, total)

    async def record_answer(
        self, idx: int, agent: str, prompt: str, answer: str, asked_tools: Any, verdict: str
    ) -> None:
        self.check()
        await self.handle.record_answer(idx, agent, prompt, answer, asked_tools, verdict)

    async def record_classifier(
        self, classifier_id: str, project: str | None, classes: list[str], rows_trained: int, rows_held_out: int,
        accuracy: float | None, epochs: int, model: Mapping[str, Any],
    ) -> str:  # fmt: skip
        self.check()
        return await self.handle.record_classifier(
            classifier_id, project, classes, rows_trained, rows_held_out, accuracy, epochs, model
        )

    async def mark_in_doubt(
        self, state: Mapping[str, Any], what: str, budget_s: float, request_timeout_s: float
    ) -> dict[str, Any]:
        self.check()
        return await self.handle.mark_in_doubt(state, what, budget_s, request_timeout_s)

    async def clock(self) -> datetime:
        self.check()
        return await self.handle.clock()

    async def step_begun(self, step: StepWrite, state: dict[str, Any]) -> StepWritten:
        self.check()
        return await self.handle.step_begun(step, state)

    async def step_ended(self, step: StepWrite, state: dict[str, Any], done: int) -> StepWritten:
        self.check()
        return await self.handle.step_ended(step, state, done)

    async def in_flight_s(self, seq: int, key: str) -> float:
        self.check()
        return await self.handle.in_flight_s(seq, key)

    def _where(self, done: int | None, total: int | None) -> str:
        if done is None:
            return "a saved state"
        return f"{done} of {total}" if total is not None else f"{done}"
