"""Background jobs over HTTP: `/v1/jobs` (issue 10; I13).

- `POST /v1/jobs {kind, params}` (operator; Idempotency-Key honoured): a queued job, run by the first
  free job worker of any process. 422 `body.kind` for a kind that does not exist or is internal (a
  workflow run is made by `POST /v1/workflows/{name}/runs`); 422 `body.params.<field>` for params the
  kind refuses.
- `GET /v1/jobs?status=&kind=&limit=` (operator): newest first.
- `GET /v1/jobs/{id}` (operator): status, progress (done of total, unit), attempts, losses, error, result.
- `POST /v1/jobs/{id}/cancel` (operator): a queued job is cancelled at once; a running one ends
  `cancelled` at its next save. 409 for a job that already ended otherwise.
- `POST /v1/jobs/{id}/restart` (operator; Idempotency-Key honoured): a new queued job with the kind and
  params of an interrupted, failed or cancelled one (`restarted_from`), from scratch; once per job. A
  keyed request's new job id derives from the token, the job and the key, so a retry after a crash is
  answered with the job the first one made, not a 409.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any, Literal, cast

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.jobs.kinds import unit_of
from ticketiq.jobs.queue import JobQueue
from ticketiq.storage.job_store import JobRow

Reader = Annotated[Principal, Depends(requires(Permission.READ_JOBS))]
Runner = Annotated[Principal, Depends(requires(Permission.RUN_JOBS))]
Status = Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]


class JobRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: str = Field(min_length=1, max_length=100, description="source_sync, fine_tune, classifier_training, ...")
    params: dict[str, Any] = Field(default_factory=dict, description="The kind's parameters.")


class Progress(BaseModel):
    done: int
    total: int | None = Field(description="Unknown (null) until the job knows it.")
    unit: str = Field(description="What is counted: issues, steps, prompts, ...")


class JobShown(BaseModel):
    id: str
    kind: str
    status: Status
    resumable: bool = Field(description="Queued again when its process dies; otherwise ended `interrupted`.")
    params: dict[str, Any]
    progress: Progress
    attempts: int = Field(description="How many times a worker claimed it.")
    losses: int = Field(description="How many times the process running it died or lost its lease.")
    error: str | None
    result: dict[str, Any] | None
    created_by: str
    created_at: datetime
    started_at: datetime | None = Field(description="When its latest attempt was claimed.")
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    cancel_requested_by: str | None
    restarted_from: str | None


def shown(job: JobRow) -> JobShown:
    return JobShown(
        id=job.id, kind=job.kind, status=cast(Status, job.status), resumable=job.resumable, params=job.params,
        progress=Progress(done=job.progress_done, total=job.progress_total, unit=unit_of(job.kind)),
        attempts=job.attempt, losses=job.losses, error=job.error, result=job.result, created_by=job.created_by,
        created_at=job.created_at, started_at=job.started_at, finished_at=job.finished_at,
        cancel_requested_at=job.cancel_requested_at, cancel_requested_by=job.cancel_requested_by,
        restarted_from=job.restarted_from,
    )  # fmt: skip


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def queue(request: Request) -> JobQueue:
        q: JobQueue = request.app.state.process.jobs.queue
        return q

    @router.post("/v1/jobs", status_code=201, response_model=JobShown)
    async def create(body: JobRequest, request: Request, runner: Runner, idempotency_key: IdempotencyKey) -> Response:
        asked = body.model_dump(mode="json")

        async def make() -> JobShown:
            key = None if idempotency_key is None else f"POST /v1/jobs\n{idempotency_key}"
            return shown(await queue(request).submit(body.kind, body.params, runner.name, key=key))

        return await once(request, "POST /v1/jobs", runner, idempotency_key, asked, make)

    @router.get("/v1/jobs")
    async def listed(
        request: Request,
        _: Reader,
        status: Status | None = None,
        kind: Annotated[str | None, Query(max_length=100)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, list[JobShown]]:
        return {"jobs": [shown(j) for j in await queue(request).listed(status, kind, limit)]}

    @router.get("/v1/jobs/{job_id}", response_model=JobShown)
    async def get(job_id: uuid.UUID, request: Request, _: Reader) -> JobShown:
        return shown(await queue(request).get(str(job_id)))

    @router.post("/v1/jobs/{job_id}/cancel", status_code=202, response_model=JobShown)
    async def cancel(job_id: uuid.UUID, request: Request, runner: Runner) -> JobShown:
        return shown(await queue(request).cancel(str(job_id), runner.name))

    @router.post("/v1/jobs/{job_id}/restart", status_code=201, response_model=JobShown)
    async def restart(job_id: uuid.UUID, request: Request, runner: Runner, idempotency_key: IdempotencyKey) -> Response:
        async def make() -> JobShown:
            key = None if idempotency_key is None else f"POST /v1/jobs/{job_id}/restart\n{idempotency_key}"
            return shown(await queue(request).restart(str(job_id), runner.name, key))

        asked = {"job_id": str(job_id)}
        return await once(request, "POST /v1/jobs/{job_id}/restart", runner, idempotency_key, asked, make)
