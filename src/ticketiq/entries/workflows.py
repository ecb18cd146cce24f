"""Workflows over HTTP (issue 10): `/v1/workflows`.

- `GET /v1/workflows` (caller): the workflows the agents file declares, with their steps and the
  input fields they read.
- `POST /v1/workflows/{name}/runs {"input": {...}}` (caller; Idempotency-Key honoured): a queued
  workflow run, run by the first free job worker of any process. 404 `path.name` for no such workflow;
  403 when the token is limited to agents and the workflow runs another; 422 `body.input.<field>` for
  an input without a field the workflow reads, or one a tool would refuse.
- `GET /v1/workflows/{name}/runs/{id}` (a caller its own runs, an operator every one): status, the
  steps executed with their keys (I11) and outputs, and the error of a failed run.

`jobs/workflow.py` says how a run executes, survives a crash, and settles a write left in doubt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import IdempotencyKey, once
from ticketiq.jobs import workflow_runs
from ticketiq.jobs.queue import JobQueue

Starter = Annotated[Principal, Depends(requires(Permission.START_RUNS))]
Reader = Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))]


class WorkflowRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input: dict[str, Any] = Field(default_factory=dict, description="What the workflow's `input.<field>` reads.")


class WorkflowRunCreated(BaseModel):
    id: str = Field(description="The workflow run's id (a job of kind workflow: GET /v1/jobs/{id} shows it too).")
    workflow: str
    status: str


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def queue(request: Request) -> JobQueue:
        q: JobQueue = request.app.state.process.jobs.queue
        return q

    @router.get("/v1/workflows")
    async def listed(request: Request, _: Reader) -> dict[str, list[dict[str, Any]]]:
        flows = engine(request).deps.catalog.workflows
        return {"workflows": [flows[name].shown() for name in sorted(flows)]}

    @router.post("/v1/workflows/{name}/runs", status_code=201, response_model=WorkflowRunCreated)
    async def start(
        name: str, body: WorkflowRunRequest, request: Request, caller: Starter, idempotency_key: IdempotencyKey
    ) -> Response:
        asked = {"name": name, **body.model_dump(mode="json")}

        async def make() -> WorkflowRunCreated:
            key = None if idempotency_key is None else f"POST /v1/workflows/{name}/runs\n{idempotency_key}"
            made = await workflow_runs.start(engine(request), queue(request), name, body.input, caller, key)
            return WorkflowRunCreated(id=made.id, workflow=name, status=made.status)

        return await once(request, "POST /v1/workflows/{name}/runs", caller, idempotency_key, asked, make)

    @router.get("/v1/workflows/{name}/runs/{run_id}")
    async def read(name: str, run_id: uuid.UUID, request: Request, reader: Reader) -> dict[str, Any]:
        found = await workflow_runs.read(engine(request), name, str(run_id), reader)
        return found.shown()
