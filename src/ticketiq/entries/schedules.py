"""Cron triggers over HTTP: `/v1/schedules`.

- `POST /v1/schedules {agent, cron, timezone, input}` (admin; Idempotency-Key honoured): a schedule
  whose first fire is its first time after now. 422 naming the field for an expression that is not five
  cron fields (or an @alias) or names no real time, and for a zone that is not an IANA name; 404 for an
  unknown agent, as POST /v1/runs. A keyed request's schedule id derives from the token and the key, so
  a retry after a crash finds the schedule the first one made (I19).
- `GET /v1/schedules` (operator): the live schedules, with each one's next fire time.
- `DELETE /v1/schedules/{id}` (admin): it fires no more; its fires are kept.
- `GET /v1/schedules/{id}/fires` (operator): newest first, each with its time, run id, status (its
  run's, or `skipped`), outcome (the answer the run handed on) and, for a failed one, the reason.

The leader fires them; `intake/scheduler.py` says how a fire is claimed and its outcome recorded once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.intake.scheduler import Scheduler
from ticketiq.storage.schedule_store import Fire, Schedule

Reader = Annotated[Principal, Depends(requires(Permission.READ_SCHEDULES))]
Admin = Annotated[Principal, Depends(requires(Permission.MANAGE_SCHEDULES))]


class ScheduleRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    cron: str = Field(min_length=1, max_length=200, description="Five fields (`0 9 * * mon-fri`) or @hourly, ...")
    timezone: str = Field(default="UTC", min_length=1, max_length=100, description="An IANA zone: Europe/Berlin.")
    input: str = Field(min_length=1, max_length=100_000)


class ScheduleShown(BaseModel):
    id: str
    name: str | None = Field(description="Set for a schedule the agents file declares.")
    agent: str
    cron: str
    timezone: str
    input: str
    next_fire_at: datetime
    created_by: str | None
    created_at: datetime


class FireShown(BaseModel):
    fire_at: datetime
    fired_at: datetime
    run_id: str | None
    status: str = Field(description="firing, the run's status (queued, running, answered, succeeded, failed, stopped), "
                        "or skipped (missed, TICKETIQ_CRON_MISSED=skip).")  # fmt: skip
    outcome: str | None = Field(description="The answer the run handed on, recorded once.")
    outcome_at: datetime | None
    reason: str | None = Field(description="Why a failed or skipped fire made no answer.")


class Fires(BaseModel):
    schedule_id: str
    fires: list[FireShown]


def _shown(s: Schedule) -> ScheduleShown:
    return ScheduleShown(id=s.id, name=s.name, agent=s.agent, cron=s.cron, timezone=s.timezone, input=s.input,
                         next_fire_at=s.next_fire_at, created_by=s.created_by, created_at=s.created_at)  # fmt: skip


def _fire(f: Fire) -> FireShown:
    return FireShown(fire_at=f.fire_at, fired_at=f.fired_at, run_id=f.run_id, status=f.status, outcome=f.outcome,
                     outcome_at=f.outcome_at, reason=f.reason)  # fmt: skip


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def scheduler(request: Request) -> Scheduler:
        return Scheduler(engine(request))

    @router.post("/v1/schedules", status_code=201, response_model=ScheduleShown)
    async def create(
        body: ScheduleRequest, request: Request, admin: Admin, idempotency_key: IdempotencyKey
    ) -> Response:
        asked = body.model_dump(mode="json")

        async def make() -> ScheduleShown:
            made = await scheduler(request).create(body.agent, body.cron, body.timezone, body.input, admin.name,
                                                   idempotency_key)  # fmt: skip
            return _shown(made)

        return await once(request, "POST /v1/schedules", admin, idempotency_key, asked, make)

    @router.get("/v1/schedules")
    async def listed(request: Request, _: Reader) -> dict[str, list[ScheduleShown]]:
        return {"schedules": [_shown(s) for s in await scheduler(request).listed()]}

    @router.delete("/v1/schedules/{schedule_id}", response_model=ScheduleShown)
    async def delete(schedule_id: uuid.UUID, request: Request, admin: Admin) -> ScheduleShown:
        return _shown(await scheduler(request).delete(str(schedule_id), admin.name))

    @router.get("/v1/schedules/{schedule_id}/fires", response_model=Fires)
    async def fires(
        schedule_id: uuid.UUID, request: Request, _: Reader, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> Fires:
        found = await scheduler(request).fires(str(schedule_id), limit)
        return Fires(schedule_id=str(schedule_id), fires=[_fire(f) for f in found])
