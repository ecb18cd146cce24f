"""The console's runs: the list (`/console/runs`, filters in the URL), a run (`/console/runs/<id>`) and
what a person does to one (stop, give input, approve or reject). Each handler reads through the engine
methods the API uses, with the session's token's scope and permissions, exactly as the API would."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import JSONResponse, Response

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission
from ticketiq.console import sessions, views, web
from ticketiq.console.sessions import Session
from ticketiq.console.web import FormRefused, Signed
from ticketiq.engine.engine import TERMINAL, Engine
from ticketiq.engine.questions import to_question
from ticketiq.errors import RequestError
from ticketiq.views import run_list
from ticketiq.views.runs import RunViews

TRANSCRIPT_LIMIT = 1000


def _checked_id(run_id: str) -> str | None:
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return None


def _denied(request: Request, session: Session, permission: Permission) -> Response | None:
    refusal = tokens.refusal(session.principal, permission)
    return None if refusal is None else web.refused(request, session, 403, refusal, "session")


def add_routes(
    router: APIRouter, engine: Callable[[Request], Engine], run_views: Callable[[Request], RunViews]
) -> None:
    @router.get("/console/runs", include_in_schema=False)
    async def runs(request: Request, session: Signed) -> Response:
        shown = run_views(request)
        scope = tokens.run_scope(session.principal)
        filters = views.filters_of(request.query_params.multi_items())
        cursor = request.query_params.get("cursor") or None
        found: list[dict[str, Any]] = []
        next_cursor = None
        error = error_field = None
        try:
            page = await shown.list_runs(
                run_list.parse_query({**filters, **({"cursor": cursor} if cursor else {})}), scope
            )
            found, next_cursor = page.runs, page.next_cursor
        except RequestError as refused:
            error, error_field = refused.message, refused.field
        counts = await shown.run_counts(scope)
        return web.render(
            request, "runs.html", 422 if error else 200, session, runs=found, filters=filters, cursor=cursor,
            next_cursor=next_cursor, counts=views.counts_row(counts, filters), recent=views.RECENT,
            statuses=run_list.STATUSES, error=error, error_field=error_field,
            next_query=views.query_for(filters, cursor=next_cursor), first_query=views.query_for(filters, cursor=None),
            api_query=views.query_for(filters, cursor=None),
        )  # fmt: skip

    @router.get("/console/runs/counts", include_in_schema=False)
    async def counts(request: Request, session: Signed) -> JSONResponse:
        """For the list's live refresh: the runs of the session's scope by status."""
        return JSONResponse({"counts": await run_views(request).run_counts(tokens.run_scope(session.principal))})

    @router.get("/console/runs/{run_id}", include_in_schema=False)
    async def run(run_id: str, request: Request, session: Signed) -> Response:
        seen = run_views(request)
        scope = tokens.run_scope(session.principal)
        checked = _checked_id(run_id)
        record = await seen.engine.get_run(checked, scope) if checked else None
        timeline = await seen.timeline(checked, scope) if checked and record else None
        if record is None or timeline is None:
            # Another token's run is not told apart from no run (as the API answers it).
            return web.refused(request, session, 404, f"no run {run_id}", "path.run_id")
        shown = {**timeline["run"], "input": record.input, "owner": record.owner, "answer": record.answer,
                 "error": record.error}  # fmt: skip
        waiting = shown.get("waiting_for_all") or ([shown["waiting_for"]] if shown.get("waiting_for") else [])
        found = await seen.transcript(record.id, 0, TRANSCRIPT_LIMIT, scope)
        transcript = views.transcript_entries(found.rows, found.pending) if found else []
        return web.render(
            request, "run.html", 200, session, run=shown, terminal=shown["status"] in TERMINAL | {"stopped"},
            waiting=waiting, fall=views.waterfall(timeline["steps"]), ledger=views.ledger(timeline["steps"]),
            attempts=views.recovery(timeline["attempts"]), transcript=transcript,
            notice=web.NOTICES.get(request.query_params.get("done", "")),
        )  # fmt: skip

    @router.post("/console/runs/{run_id}/stop", include_in_schema=False)
    async def stop(run_id: str, request: Request, session: Signed) -> Response:
        try:
            await web.checked_form(request, session.csrf)
        except FormRefused as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        denied = _denied(request, session, Permission.STOP_RUNS)
        checked = _checked_id(run_id)
        if denied is not None or checked is None:
            return denied or web.refused(request, session, 404, f"no run {run_id}", "path.run_id")
        try:
            await engine(request).request_stop(checked, session.principal.name)
        except RequestError as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        return web.after_post(f"/console/runs/{checked}", "stopped")

    @router.post("/console/runs/{run_id}/input", include_in_schema=False)
    async def give_input(run_id: str, request: Request, session: Signed) -> Response:
        try:
            form = await web.checked_form(request, session.csrf)
            text = web.text_field(form, "text", required=True, max_length=100_000)
            question = _checked_id(web.text_field(form, "question_id", required=True, max_length=100))
            if question is None:
                raise FormRefused(422, "question_id is not a question's id", "body.question_id")
        except FormRefused as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        denied = _denied(request, session, Permission.START_RUNS)
        checked = _checked_id(run_id)
        if denied is not None or checked is None:
            return denied or web.refused(request, session, 404, f"no run {run_id}", "path.run_id")
        answer = to_question(text, session.principal.name, question)  # I18: bound to the question shown
        try:
            answered = await engine(request).give_input(checked, answer, tokens.run_scope(session.principal))
        except RequestError as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        problem = views.input_refusal(answered.verdict.value)
        if problem is not None:
            return web.refused(request, session, problem[0], problem[1], "body.question_id")
        return web.after_post(f"/console/runs/{checked}", "input")

    @router.post("/console/approvals/{approval_id}", include_in_schema=False)
    async def decide(approval_id: str, request: Request, session: Signed) -> Response:
        try:
            form = await web.checked_form(request, session.csrf)
            decision = web.text_field(form, "decision", required=True, max_length=20)
            reason = web.text_field(form, "reason", required=False, max_length=2000)
            if decision not in ("approve", "reject"):
                raise FormRefused(422, "decision is approve or reject", "body.decision")
        except FormRefused as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        denied = _denied(request, session, Permission.DECIDE_APPROVALS)
        checked = _checked_id(approval_id)
        if denied is not None or checked is None:
            return denied or web.refused(request, session, 404, f"no approval {approval_id}", "path.approval_id")
        try:
            await engine(request).decide_approval(
                checked, decision == "approve", session.principal.name, reason or None
            )
        except RequestError as refused:
            return web.refused(request, session, refused.status, refused.message, refused.field)
        back = form.get("back")
        target = sessions.safe_next(back if isinstance(back, str) else None)
        return web.after_post(target, "approved" if decision == "approve" else "rejected")
