"""Cron schedules and their fires: typed rows over `queries/schedules.sql`.

Nothing here decides: `values/schedules.py` says what fires when, `intake/scheduler.py` acts on it. The
one statement a run's attempt makes about its fire (the cron hand-on) is the run store's, fenced by
the attempt like every statement about a run (`RunHandle.record_fire_outcome`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ticketiq.storage.database import Database
from ticketiq.storage.rows import row_as


@dataclass(frozen=True)
class Schedule:
    id: str
    name: str | None  # declared in the agents file; None: made through the API
    agent: str
    cron: str
    timezone: str
    input: str
    next_fire_at: datetime
    created_by: str | None
    created_at: datetime


@dataclass(frozen=True)
class Due:
    """A row of the leader's check: a due schedule (`due`) or a fire whose run was not made (`unmade`)."""

    kind: str
    id: str
    name: str | None
    agent: str
    cron: str
    timezone: str
    input: str
    next_fire_at: datetime
    created_by: str | None
    fire_at: datetime | None  # unmade: the fire's time
    run_key: str | None  # unmade: the fire's run key
    now: datetime  # the clock the check judged by


@dataclass(frozen=True)
class Recorded:
    """A fire row one leader inserted: its run is this leader's to make (unless it was skipped)."""

    fire_at: datetime
    run_key: str
    skipped: bool


@dataclass(frozen=True)
class Fire:
    fire_at: datetime
    fired_at: datetime
    run_id: str | None
    status: str  # firing / the run's status / skipped / failed
    outcome: str | None
    outcome_at: datetime | None
    reason: str | None


class ScheduleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def clock(self) -> datetime:
        row = await self.db.fetch_one("schedules.clock")
        assert row is not None
        now: datetime = row["now"]
        return now

    async def create(self, params: dict[str, object]) -> tuple[Schedule, bool]:
        """The schedule, and whether this statement made it (False: its id named one made before, returned
        once it is on the synchronous standby, I20)."""
        row = await self.db.fetch_one("schedules.create", params)
        assert row is not None  # inserted, or the row that held the id
        return row_as(Schedule, row), bool(row["made"])

    async def seed(self, params: dict[str, object]) -> bool | None:
        """Upsert a declared schedule by name: True inserted, False updated, None unchanged (or deleted)."""
        row = await self.db.fetch_one("schedules.seed", params)
        return None if row is None else bool(row["inserted"])

    async def listed(self) -> list[Schedule]:
        return [row_as(Schedule, r) for r in await self.db.fetch_all("schedules.list")]

    async def get(self, schedule_id: str) -> Schedule | None:
        row = await self.db.fetch_one("schedules.get", {"id": schedule_id})
        return None if row is None else row_as(Schedule, row)

    async def delete(self, schedule_id: str, by: str) -> Schedule | None:
        row = await self.db.fetch_one("schedules.delete", {"id": schedule_id, "by": by})
        return None if row is None else row_as(Schedule, row)

    async def due(self, now: datetime | None, limit: int) -> list[Due]:
        rows = await self.db.fetch_all("schedules.due", {"now": now, "limit": limit})
        return [row_as(Due, r) for r in rows]

    async def fire(
        self,
        schedule_id: str,
        next_fire_at: datetime,
        fire_at: datetime | None,
        run_key: str | None,
        skipped: bool,
        reason: str | None,
        holder: str,
    ) -> Recorded | None:
        """Move the schedule on and record the fire, unless a fire of that time exists; the fire row when
        this statement inserted it."""
        row = await self.db.fetch_one("schedules.fire", {
            "schedule_id": schedule_id, "next_fire_at": next_fire_at, "fire_at": fire_at, "run_key": run_key,
            "skipped": skipped, "reason": reason, "holder": holder,
        })  # fmt: skip
        return None if row is None else row_as(Recorded, row)

    async def link_run(self, run_key: str, run_id: str) -> None:
        await self.db.execute("schedules.link_run", {"run_key": run_key, "run_id": run_id})

    async def fire_failed(self, run_key: str, reason: str) -> None:
        await self.db.execute("schedules.fire_failed", {"run_key": run_key, "reason": reason})

    async def fires(self, schedule_id: str, limit: int) -> list[Fire]:
        rows = await self.db.fetch_all("schedules.fires", {"schedule_id": schedule_id, "limit": limit})
        return [row_as(Fire, r) for r in rows]
