"""A claimed job as its kind's `run` sees it (`kinds.Job`): the row as claimed, and its statements,
each fenced by the attempt (I3) and refused once the job's lease is lost or its deadline passed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.errors import LeaseLost
from ticketiq.jobs.kinds import JobCancelled, JobLost

if TYPE_CHECKING:
    import httpx

    from ticketiq.engine.engine import Engine
    from ticketiq.engine.leases import HeldLease
    from ticketiq.settings import Settings
    from ticketiq.storage.database import Database, Row
    from ticketiq.storage.job_store import JobHandle


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
    db: Database
    settings: Settings
    http: httpx.AsyncClient
    lease: HeldLease
    handle: JobHandle

    def check(self) -> None:
        """I3: raise JobLost once the lease is lost or its local deadline passed."""
        try:
            self.lease.check()
        except LeaseLost as exc:
            raise JobLost(self.id, self.attempt, f"its lease was lost ({exc.why})") from exc

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

    async def fenced(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        self.check()
        return await self.handle.fenced(query, params)

    def _where(self, done: int | None, total: int | None) -> str:
        if done is None:
            return "a saved state"
        return f"{done} of {total}" if total is not None else f"{done}"
