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
from ticketiq.console import ops_pages, sessions, views, web
from ticketiq.console.sessions import Session
from ticketiq.console.web import FormRefused, Refusal, Signed
from ticketiq.engine.engine import TERMINAL, Engine
from ticketiq.engine.questions import to_question
from ticketiq.errors import RequestError
from ticketiq.runtime import tracing
from ticketiq.views import run_list
from ticketiq.views.runs import RunViews

TRANSCRIPT_LIMIT = 1000


def _checked_id(run_id: str) -> str | None:
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        return None


def _denied(session: Session, permission: Permission) -> Refusal | None:
    refusal = tokens.refusal(session.principal, permission)
    return None if refusal is None else Refusal(403, refusal, "session")


def _no_run(run_id: str) -> Refusal:
    return Refusal(404, f"no run {run_id}", "path.run_id")


async def run_page(
    request: Request, session: Session, run_id: str, seen: RunViews, refusal: Refusal | None = None
) -> Response:
    """A run's page; with `refusal`, shown again for one of its forms whose POST was refused. Another
    token's run is not told apart from no run (as the API answers it)."""
    scope = tokens.run_scope(session.principal)
    checked = _checked_id(run_id)
    record = await seen.engine.get_run(checked, scope) if checked else None
    timeline = await seen.timeline(checked, scope) if checked and record else None
    if record is None or timeline is None:
        return web.refused(request, session, _no_run(run_id))
    shown = {**timeline["run"], "input": record.input, "owner": record.owner, "answer": record.answer,
             "error": record.error}  # fmt: skip
    waiting = shown.get("waiting_for_all") or ([shown["waiting_for"]] if shown.get("waiting_for") else [])
    trace_id = f"{tracing.run_trace_id(record.id, await seen.store.traceparent(record.id)):032x}"
    template = seen.engine.deps.settings.trace_url
    found = await seen.transcript(record.id, 0, TRANSCRIPT_LIMIT, scope)
    transcript = views.transcript_entries(found.rows, found.pending) if found else []
    return web.render(
        request, "run.html", 200, session, refusal, run=shown, terminal=shown["status"] in TERMINAL | {"stopped"},
        waiting=waiting, fall=views.waterfall(timeline["steps"]), ledger=views.ledger(timeline["steps"]),
        attempts=views.recovery(timeline["attempts"]), transcript=transcript, trace_id=trace_id,
        trace_url=template.replace("{trace_id}", trace_id) if template else None,
    )  # fmt: skip


async def _back(request: Request) -> str:
    """The console page an approval's form was posted from (its `back` field), else the approvals queue."""
    back = (await request.form()).get("back")  # read once already: Starlette keeps the parsed form
    return sessions.safe_next(back if isinstance(back, str) else "/console/approvals")


def add_routes(
    router: APIRouter, engine: Callable[[Request], Engine], run_views: Callable[[Request], RunViews]
) -> None:
    async def decided_again(request: Request, session: Session, back: str, refusal: Refusal) -> Response:
        """An approval's form refused: the page it was posted from, again, saying why."""
        run_id = back.removeprefix("/console/runs/")
        if back.startswith("/console/runs/") and _checked_id(run_id) is not None:
            return await run_page(request, session, run_id, run_views(request), refusal)
        return await ops_pages.approvals_page(request, session, engine(request), "pending", refusal)

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
        return await run_page(request, session, run_id, run_views(request))

    # Each POST: a refused field shows its form's page again with the 4xx, naming the field (issue 32).

    @router.post("/console/runs/{run_id}/stop", include_in_schema=False)
    async def stop(run_id: str, request: Request, session: Signed) -> Response:
        try:
            await web.checked_form(request, session.csrf)
        except FormRefused as refused:
            return await run_page(request, session, run_id, run_views(request), refused.refusal)
        denied = _denied(session, Permission.STOP_RUNS)
        checked = _checked_id(run_id)
        if denied is not None or checked is None:
            return web.refused(request, session, denied or _no_run(run_id))
        try:
            await engine(request).request_stop(checked, session.principal.name)
        except RequestError as refused:
            return await run_page(request, session, checked, run_views(request), Refusal.of(refused))
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
            return await run_page(request, session, run_id, run_views(request), refused.refusal)
        denied = _denied(session, Permission.START_RUNS)
        checked = _checked_id(run_id)
        if denied is not None or checked is None:
            return web.refused(request, session, denied or _no_run(run_id))
        answer = to_question(text, session.principal.name, question)  # I18: bound to the question shown
        try:
            answered = await engine(request).give_input(checked, answer, tokens.run_scope(session.principal))
        except RequestError as refused:
            return await run_page(request, session, checked, run_views(request), Refusal.of(refused))
        problem = views.input_refusal(answered.verdict.value)
        if problem is not None:
            refusal = Refusal(problem[0], problem[1], "body.question_id")
            return await run_page(request, session, checked, run_views(request), refusal)
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
            return await decided_again(request, session, await _back(request), refused.refusal)
        denied = _denied(session, Permission.DECIDE_APPROVALS)
        checked = _checked_id(approval_id)
        if denied is not None or checked is None:
            return web.refused(request, session, denied or Refusal(404, f"no approval {approval_id}",
                                                                   "path.approval_id"))  # fmt: skip
        try:
            await engine(request).decide_approval(
                checked, decision == "approve", session.principal.name, reason or None
            )
        except RequestError as refused:
            # A request decided already, or withdrawn with its run: the page again, saying which.
            return await decided_again(request, session, await _back(request), Refusal.of(refused))
        return web.after_post(await _back(request), "approved" if decision == "approve" else "rejected")
