"""The console's operator pages: approvals, jobs (cancel, restart), workflow runs with their steps,
schedules and their fires, the Teams inbox, the processes. Each reads through what the API's routes use
and needs the permission the API's route needs."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission
from ticketiq.console import web
from ticketiq.console.sessions import Session
from ticketiq.console.web import FormRefused, Refusal, Signed
from ticketiq.engine.engine import Engine
from ticketiq.errors import RequestError
from ticketiq.intake.scheduler import Scheduler
from ticketiq.intake.teams_turns import TeamsTurns
from ticketiq.jobs import workflow_runs
from ticketiq.jobs.kinds import unit_of
from ticketiq.jobs.queue import JobQueue
from ticketiq.jobs.workflow import KIND as WORKFLOW
from ticketiq.views.runs import RunViews

LIST_LIMIT = 100
FIRES_SHOWN = 10
# A caller sees its own workflow runs among this many of the newest (the job list is not scoped by token).
WORKFLOW_WINDOW = 500
APPROVAL_STATUSES = ("pending", "approved", "rejected", "withdrawn")  # withdrawn: with its run, which ended


def _denied(request: Request, session: Session, permission: Permission) -> Response | None:
    refusal = tokens.refusal(session.principal, permission)
    return None if refusal is None else web.refused(request, session, Refusal(403, refusal, "session"))


def _notice(request: Request) -> str | None:
    return web.NOTICES.get(request.query_params.get("done", ""))


async def approvals_page(
    request: Request, session: Session, engine: Engine, status: str, refusal: Refusal | None = None
) -> Response:
    """The approvals of one status; with `refusal`, the queue shown again for a decision it refused."""
    denied = _denied(request, session, Permission.DECIDE_APPROVALS)
    if denied is not None:
        return denied
    # Who asked: the run's agent, on behalf of the token that started it (read with the requests).
    found = await engine.asked_approvals(status, LIST_LIMIT)
    shown = [{**a.approval.shown(), "agent": a.agent, "asked_by": a.asked_by} for a in found]
    return web.render(request, "approvals.html", 200, session, refusal, approvals=shown, status=status,
                      statuses=APPROVAL_STATUSES, notice=_notice(request))  # fmt: skip


async def jobs_page(request: Request, session: Session, queue: JobQueue, refusal: Refusal | None = None) -> Response:
    """The background jobs; with `refusal`, shown again for an action it refused."""
    denied = _denied(request, session, Permission.READ_JOBS)
    if denied is not None:
        return denied
    found = await queue.listed(None, None, LIST_LIMIT)
    shown = [{**asdict(j), "unit": unit_of(j.kind)} for j in found]
    return web.render(request, "jobs.html", 200, session, refusal, jobs=shown, notice=_notice(request))


def add_routes(
    router: APIRouter, engine: Callable[[Request], Engine], run_views: Callable[[Request], RunViews]
) -> None:
    def queue(request: Request) -> JobQueue:
        q: JobQueue = request.app.state.process.jobs.queue
        return q

    @router.get("/console/approvals", include_in_schema=False)
    async def approvals(request: Request, session: Signed) -> Response:
        status = request.query_params.get("status", "pending")
        if status not in APPROVAL_STATUSES:
            wrong = Refusal(422, f"status is one of {', '.join(APPROVAL_STATUSES)}", "query.status")
            return _denied(request, session, Permission.DECIDE_APPROVALS) or web.refused(request, session, wrong)
        return await approvals_page(request, session, engine(request), status)

    @router.get("/console/jobs", include_in_schema=False)
    async def jobs(request: Request, session: Signed) -> Response:
        return await jobs_page(request, session, queue(request))

    @router.post("/console/jobs/{job_id}/{action}", include_in_schema=False)
    async def job_action(job_id: str, action: str, request: Request, session: Signed) -> Response:
        # A refused field shows the jobs page again with the 4xx, naming the field (issue 32).
        try:
            await web.checked_form(request, session.csrf)
        except FormRefused as refused:
            return await jobs_page(request, session, queue(request), refused.refusal)
        denied = _denied(request, session, Permission.RUN_JOBS)
        if denied is not None:
            return denied
        try:
            checked = str(uuid.UUID(job_id))
        except ValueError:
            return await jobs_page(request, session, queue(request), Refusal(404, f"no job {job_id}", "path.job_id"))
        try:
            if action == "cancel":
                await queue(request).cancel(checked, session.principal.name)
                return web.after_post("/console/jobs", "cancelled")
            if action == "restart":
                await queue(request).restart(checked, session.principal.name)
                return web.after_post("/console/jobs", "restarted")
        except RequestError as refused:
            return await jobs_page(request, session, queue(request), Refusal.of(refused))
        return await jobs_page(request, session, queue(request), Refusal(404, f"no action {action} on jobs",
                                                                         "path.action"))  # fmt: skip

    @router.get("/console/workflows", include_in_schema=False)
    async def workflows(request: Request, session: Signed) -> Response:
        scope = tokens.run_scope(session.principal)
        found = await queue(request).listed(None, WORKFLOW.name, LIST_LIMIT if scope is None else WORKFLOW_WINDOW)
        mine = [j for j in found if scope is None or j.created_by == scope][:LIST_LIMIT]
        flows = engine(request).deps.catalog.workflows
        return web.render(request, "workflows.html", 200, session, runs=mine,
                          declared=[flows[n] for n in sorted(flows)])  # fmt: skip

    @router.get("/console/workflows/{job_id}", include_in_schema=False)
    async def workflow(job_id: str, request: Request, session: Signed) -> Response:
        eng = engine(request)
        try:
            checked = str(uuid.UUID(job_id))
            job = await queue(request).get(checked)
            name = job.params.get("workflow")
            if job.kind != WORKFLOW.name or not isinstance(name, str):
                raise RequestError("path.job_id", f"no workflow run {job_id}")
            # Scoped as GET /v1/workflows/{name}/runs/{id}: a caller reads its own runs only.
            found = await workflow_runs.read(eng, name, checked, session.principal)
        except ValueError:
            return web.refused(request, session, Refusal(404, f"no workflow run {job_id}", "path.job_id"))
        except RequestError as refused:
            status = 404 if refused.status in (403, 404) else refused.status
            return web.refused(request, session, Refusal(status, f"no workflow run {job_id}", "path.job_id"))
        return web.render(request, "workflow.html", 200, session, run=found.shown())

    @router.get("/console/schedules", include_in_schema=False)
    async def schedules(request: Request, session: Signed) -> Response:
        denied = _denied(request, session, Permission.READ_SCHEDULES)
        if denied is not None:
            return denied
        scheduler = Scheduler(engine(request))
        listed = await scheduler.listed()
        fires = await asyncio.gather(*(scheduler.fires(s.id, FIRES_SHOWN) for s in listed))
        shown: list[dict[str, Any]] = [{"schedule": s, "fires": f} for s, f in zip(listed, fires, strict=True)]
        return web.render(request, "schedules.html", 200, session, schedules=shown)

    @router.get("/console/teams", include_in_schema=False)
    async def teams(request: Request, session: Signed) -> Response:
        denied = _denied(request, session, Permission.READ_EVERY_RUN)
        if denied is not None:
            return denied
        raw = request.query_params.get("before")
        before = int(raw) if raw and raw.isdigit() and 0 < int(raw) < 2**62 else None
        entries = await TeamsTurns(engine(request)).entries(before, LIST_LIMIT)
        older = entries[-1].id if len(entries) == LIST_LIMIT else None
        return web.render(request, "teams.html", 200, session, entries=entries, before=older)

    @router.get("/console/processes", include_in_schema=False)
    async def processes(request: Request, session: Signed) -> Response:
        denied = _denied(request, session, Permission.READ_EVERY_RUN)
        if denied is not None:
            return denied
        found = await run_views(request).processes()
        return web.render(
            request,
            "processes.html",
            200,
            session,
            live=found["processes"],
            ended=found["ended"],
            left=found["left_for_newer_release"],
            database=found["database"],
            retention=found["retention"],
        )
