"""The HTTP API: runs, their transcripts, Stop, approvals, audit, gates, health.

Bad input gets a 4xx whose body names the field; nothing is written for a refused request.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, HTTPException, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.engine.seal import canonical
from ticketiq.entries import gates_api
from ticketiq.errors import StorageError
from ticketiq.process import AppProcess
from ticketiq.settings import Settings

log = logging.getLogger(__name__)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(min_length=1, max_length=100_000)
    may_wait: bool | None = None


class RunCreated(BaseModel):
    id: str
    status: str


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    decision: Literal["approve", "reject"]
    by: str = Field(default="api", min_length=1, max_length=200)
    reason: str = Field(default="", max_length=2000)


class StopRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="api", min_length=1, max_length=200)


def field_error(status: int, field: str, message: str) -> HTTPException:
    return HTTPException(status, detail=[{"loc": field.split("."), "msg": message}])


def create_app(settings: Settings, process: AppProcess | None = None) -> FastAPI:
    """The app; with no process given, its lifespan starts one (and stops it)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        owned = process is None
        app.state.process = process or await AppProcess.start(settings)
        try:
            yield
        finally:
            if owned:
                await app.state.process.stop()

    app = FastAPI(title="TicketIQ run engine", version="0.1.0", lifespan=lifespan)

    def proc(request: Request) -> AppProcess:
        p: AppProcess = request.app.state.process
        return p

    @app.exception_handler(StorageError)
    async def storage_unavailable(request: Request, exc: StorageError) -> JSONResponse:
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return JSONResponse({"detail": "the database is unavailable; retry"}, status_code=503)

    @app.post("/v1/runs", status_code=201, response_model=RunCreated)
    async def create_run(
        body: RunRequest,
        request: Request,
        idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
    ) -> RunCreated:
        p = proc(request)
        agent = p.engine.deps.catalog.get(body.agent)
        if agent is None:
            raise field_error(404, "body.agent", f"no agent named {body.agent!r}")
        digest = hashlib.sha256(canonical(body.model_dump())).hexdigest() if idempotency_key else None
        created = await p.engine.create_run(
            agent,
            body.input,
            may_wait=body.may_wait,
            channel="api",
            idempotency_key=idempotency_key,
            request_hash=digest,
        )
        if not created.created and created.request_hash != digest:
            raise field_error(
                422, "header.Idempotency-Key", "this Idempotency-Key was used with a different request body"
            )
        if created.created:
            await p.engine.start(created.id)
        row = await p.db.fetch_one("runs.status", {"run_id": created.id})
        return RunCreated(id=created.id, status=str(row["status"]) if row else created.status)

    @app.get("/v1/runs/{run_id}")
    async def get_run(run_id: uuid.UUID, request: Request) -> dict[str, Any]:
        row = await proc(request).db.fetch_one("runs.get", {"run_id": str(run_id)})
        if row is None:
            raise field_error(404, "path.run_id", f"no run {run_id}")
        return {
            "id": str(row["id"]),
            "agent": row["agent"],
            "status": row["status"],
            "answer": row["answer"],
            "error": row["error"],
            "steps": row["step"],
            "attempt": row["attempt"],
            "losses": row["losses"],
            "owner": row["owner"],
            "channel": row["channel"],
            "may_wait": row["may_wait"],
            "parent_run_id": str(row["parent_run_id"]) if row["parent_run_id"] else None,
            "stop_requested_at": row["stop_requested_at"],
            "created_at": row["created_at"],
            "started_at": row["started_at"],
            "finished_at": row["finished_at"],
            "checkpoint_at": row["checkpoint_at"],
        }

    @app.get("/v1/runs/{run_id}/transcript")
    async def transcript(
        run_id: uuid.UUID,
        request: Request,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> dict[str, Any]:
        p = proc(request)
        if await p.db.fetch_one("runs.status", {"run_id": str(run_id)}) is None:
            raise field_error(404, "path.run_id", f"no run {run_id}")
        rows = await p.db.fetch_all("transcripts.for_run", {"run_id": str(run_id), "after": after, "limit": limit})
        waiting = await p.db.fetch_one("runs.unflushed", {"run_id": str(run_id)})
        return {
            "run_id": str(run_id),
            "entries": [entry for r in rows for entry in _expand(r)],
            # Written with the checkpoint, not yet to the transcript table (at most about a second).
            "pending": [{"kind": e["kind"], **e["body"]} for e in (waiting or {}).get("entries") or []],
        }

    @app.post("/v1/runs/{run_id}/stop", status_code=202)
    async def stop_run(run_id: uuid.UUID, request: Request, body: StopRequest | None = None) -> dict[str, Any]:
        p = proc(request)
        by = (body or StopRequest()).by
        row = await p.db.fetch_one("runs.request_stop", {"run_id": str(run_id), "by": by})
        if row is None:
            raise field_error(404, "path.run_id", f"no run {run_id}")
        await p.db.execute("runs.stop_idle", {"run_id": str(run_id), "by": by})
        status = await p.db.fetch_one("runs.status", {"run_id": str(run_id)})
        return {"id": str(run_id), "stop_requested": True, "status": status["status"] if status else None}

    @app.get("/v1/approvals")
    async def approvals(
        request: Request,
        status: Literal["pending", "approved", "rejected"] | None = "pending",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        rows = await proc(request).db.fetch_all("approvals.list", {"status": status, "limit": limit})
        return {"approvals": [_approval(r) for r in rows]}

    @app.post("/v1/approvals/{approval_id}")
    async def decide(approval_id: uuid.UUID, body: Decision, request: Request) -> dict[str, Any]:
        p = proc(request)
        existing = await p.db.fetch_one("approvals.get", {"id": str(approval_id)})
        if existing is None:
            raise field_error(404, "path.approval_id", f"no approval {approval_id}")
        status = "approved" if body.decision == "approve" else "rejected"
        row = await p.db.fetch_one(
            "approvals.decide",
            {"id": str(approval_id), "status": status, "by": body.by, "reason": body.reason or None},
        )
        if row is None:
            raise field_error(409, "path.approval_id", f"approval {approval_id} was already {existing['status']}")
        # The waiting run goes on here; if another call of its step still waits, it suspends again.
        await p.engine.start(str(row["run_id"]))
        decided = await p.db.fetch_one("approvals.get", {"id": str(approval_id)})
        return _approval(decided or existing)

    @app.get("/v1/audit")
    async def audit(
        request: Request,
        run_id: uuid.UUID | None = None,
        action: str | None = None,
        after: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> dict[str, Any]:
        rows = await proc(request).db.fetch_all(
            "audit.list",
            {"run_id": str(run_id) if run_id else None, "action": action, "after": after, "limit": limit},
        )
        return {"entries": [{**r, "run_id": str(r["run_id"]) if r["run_id"] else None} for r in rows]}

    @app.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        p = proc(request)
        return PlainTextResponse(
            p.engine.deps.metrics.render(lease_lapses=p.keeper.lapses), media_type="text/plain; version=0.0.4"
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/readyz")
    async def readyz(request: Request) -> JSONResponse:
        try:
            await proc(request).db.fetch_one("runs.ping")
        except StorageError as exc:
            return JSONResponse({"ready": False, "reason": str(exc)}, status_code=503)
        return JSONResponse({"ready": True, "process": proc(request).engine.deps.holder})

    gates_api.add_routes(app, proc)
    return app


def _expand(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A transcript row holds one entry, or (kind `entries`) the several one statement wrote."""
    if row["kind"] == "entries":
        return [{"id": row["id"], "at": row["at"], "kind": e["kind"], **e["body"]} for e in row["body"]["entries"]]
    return [{"id": row["id"], "at": row["at"], "kind": row["kind"], **row["body"]}]


def _approval(row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "id": str(row["id"]), "run_id": str(row["run_id"])}
