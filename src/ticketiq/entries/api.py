"""The HTTP API: runs, their transcripts, Stop, approvals, audit, gates, tokens, health.

Handlers only translate: parse, call one engine method, map its typed result or domain error to a
response. Bad input gets a 4xx whose body names the field; nothing is written for a refused request.
Every route but health, readiness, metrics and the OpenAPI takes a bearer token (`entries/auth.py`);
each names the permission it needs, and the token's name is the actor of what it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from ticketiq import console
from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine import run_keys
from ticketiq.engine.engine import Engine
from ticketiq.engine.questions import Answer, Answered, Verdict, by_key, to_question
from ticketiq.entries import (
    a2a,
    answers,
    auth,
    copilot,
    gates_api,
    hooks,
    inspector,
    jobs,
    probes,
    run_reads,
    run_wait,
    runs_list,
    schedules,
    teams,
    text_guard,
    ticket_events,
    timeline,
    trace_context,
    workflows,
)
from ticketiq.entries.auth import requires
from ticketiq.entries.idempotency import REPLAYED, IdempotencyKey, once
from ticketiq.entries.json_answer import field_error, json_answer, storage_refusal
from ticketiq.entries.probes import READY_WITHIN_S
from ticketiq.errors import Conflict, Forbidden, NotFound, RequestError, StorageError
from ticketiq.intake.idempotency import request_hash
from ticketiq.process import AppProcess
from ticketiq.runtime import interpreter, release, stall
from ticketiq.settings import Settings
from ticketiq.storage.rows import Approval
from ticketiq.storage.token_store import TokenStore
from ticketiq.views.runs import RunViews

log = logging.getLogger(__name__)


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(min_length=1, max_length=200)
    input: str = Field(min_length=1, max_length=100_000)
    may_wait: bool | None = None


class RunCreated(BaseModel):
    id: str
    status: str


class InputRequest(BaseModel):
    # No `by`: who gave the input is the token's name.
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=100_000)
    question_id: uuid.UUID | None = Field(
        default=None,
        description="The question this input answers, as `GET /v1/runs/{id}` lists it in `waiting_for_all` (I18). "
        "Without it, send an Idempotency-Key: the input then answers the oldest pending question, bound to the key.",
    )


class InputTaken(BaseModel):
    id: str
    status: str  # the run's, now
    question_id: str | None  # the question the input answered (or, sent again, had answered)


class Decision(BaseModel):
    # No `by`: who decided is the token's name, never a field a client asserts.
    model_config = ConfigDict(extra="forbid")
    decision: Literal["approve", "reject"]
    reason: str = Field(default="", max_length=2000)


class StopRequest(BaseModel):
    # Empty: who stopped the run is the token's name. Kept so a client that sends `{}` is still served.
    model_config = ConfigDict(extra="forbid")


class HoldRequest(BaseModel):
    """Why the run is held, or released (optional); who did it is the token's name."""

    model_config = ConfigDict(extra="forbid")
    reason: str | None = Field(default=None, min_length=1, max_length=2000)


def not_json(content_type: str | None, errors: Any) -> str | None:
    """Why a body was refused, when it was refused whole and sent without a JSON content type."""
    whole = any(tuple(error.get("loc", ())) == ("body",) for error in errors)
    media = (content_type or "").split(";")[0].strip().lower()
    if not whole or media == "application/json" or media.endswith("+json"):
        return None
    return f"send the body as JSON with Content-Type: application/json (got {media or 'no Content-Type'})"


def create_app(
    settings: Settings, process: AppProcess | None = None, *, watch_stalls: bool = False, freeze_start_up: bool = False
) -> FastAPI:
    """The app; with no process given, its lifespan starts one (and stops it). `watch_stalls` (`ticketiq
    serve`): a process stalled past its leases stops at its next statement or request (`runtime/stall.py`).
    `freeze_start_up` (`ticketiq serve`, one app a process): what start-up made is never collected."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if watch_stalls:
                await stack.enter_async_context(stall.watching(stall.limit_for(settings.lease_ttl_s,
                                                                               settings.lease_renew_s)))  # fmt: skip
            owned = process is None
            app.state.process = process or await AppProcess.start(settings)
            # Found tokens are kept while the gate listener hears their changes (auth/token_cache.py).
            app.state.tokens = TokenStore(app.state.process.db, app.state.process.engine.deps.gate_watch.tokens)
            app.state.waiters = run_wait.Waiters(settings.max_waiters)
            engine = app.state.process.engine
            app.state.readiness = probes.Readiness(engine.ready, lambda: engine.deps.db.outage.down,
                                                   engine.deps.holder)  # fmt: skip
            a2a.start(app)
            if freeze_start_up:
                interpreter.freeze_start_up()
            try:
                yield
            finally:
                await a2a.close(app)
                if owned:
                    await app.state.process.stop()

    app = FastAPI(title="TicketIQ run engine", version=release.current().version, lifespan=lifespan)
    # The last added runs first: a request without a valid token is refused before its body is read;
    # then one holding text Postgres cannot store (I16), before any route sees it; a plain read of a run is
    # answered last, authenticated, before FastAPI routes it (entries/run_reads.py).
    app.add_middleware(run_reads.RunReads)
    app.add_middleware(text_guard.StorableText)
    app.add_middleware(auth.BearerAuth, store=lambda scope: scope["app"].state.tokens, session=console.principal_of)
    # A run any request starts continues the request's trace (entries/trace_context.py).
    app.add_middleware(trace_context.TraceContext)
    # Outermost of ours: the probes are answered before anything else looks at them (entries/probes.py).
    app.add_middleware(probes.Probes, readiness=lambda scope: scope["app"].state.readiness)

    @app.exception_handler(RequestError)
    async def refused(request: Request, exc: RequestError) -> JSONResponse:
        return field_error(exc.status, exc.field, exc.message)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI reads a body sent without a JSON content type as a string, and refuses it with 422 "Input
        # should be a valid dictionary": say instead what was wrong with the request.
        wrong = not_json(request.headers.get("content-type"), exc.errors())
        if wrong is not None:
            return field_error(415, "header.content-type", wrong)
        return await request_validation_exception_handler(request, exc)

    @app.exception_handler(StorageError)
    async def storage_failed(request: Request, exc: StorageError) -> JSONResponse:
        log.error("%s %s: %s", request.method, request.url.path, exc)
        return storage_refusal(exc)

    app.include_router(ROUTES)
    console.install(app)
    auth.describe_bearer(app, ROUTES)
    return app


def _proc(request: Request) -> AppProcess:
    p: AppProcess = request.app.state.process
    return p


def _engine(request: Request) -> Engine:
    return _proc(request).engine


# `?wait=S` of GET and POST /v1/runs (issue 35, entries/run_wait.py).
WaitSeconds = Annotated[
    float | None,
    Query(
        ge=0,
        le=run_wait.WAIT_MAX_S,
        description="Seconds to wait, at most, for the run to end or to wait for "
        "a person: the answer comes as soon as it does.",
    ),
]


def _views(request: Request) -> RunViews:
    return _proc(request).views


def _token_store(request: Request) -> TokenStore:
    store: TokenStore = request.app.state.tokens
    return store


def _routes() -> APIRouter:
    """Every route of the API and the console, made once a process (`ROUTES`)."""
    router = APIRouter()

    @router.post("/v1/runs", status_code=201, response_model=RunCreated)
    async def create_run(
        body: RunRequest,
        request: Request,
        caller: Annotated[Principal, Depends(requires(Permission.START_RUNS))],
        idempotency_key: IdempotencyKey,
        wait: WaitSeconds = None,
    ) -> Response:
        refusal = tokens.start_refusal(caller, body.agent)
        if refusal is not None:
            raise Forbidden("body.agent", refusal)
        asked = body.model_dump(mode="json")
        # No `once`: runs.idempotency_key is the dedupe, atomic with the run's birth and kept as long as the
        # run, so a repeat is answered from the run row (found durable, I20), even after a crash between
        # the making and the answer: there is no window in which it is "still being answered". The key is
        # the token's own, in the API's namespace: no internal run key can be made here (I19).
        created = await _engine(request).submit(
            body.agent, body.input, may_wait=body.may_wait, channel="api",
            idempotency_key=run_keys.api(caller.name, idempotency_key) if idempotency_key else None,
            request_hash=request_hash(asked) if idempotency_key else None, actor=caller.name,
        )  # fmt: skip
        # A repeat gets the first answer: the run, with the status it was made with (entries/idempotency.py).
        shown = RunCreated(id=created.id, status=created.born_status or created.status)
        replayed = None if created.created else {REPLAYED: "true"}
        if wait:
            # With `wait`: the run as GET /v1/runs/{id} shows it, once it ended, waits for a person, or S passed.
            waited = await run_wait.waited_run(request, created.id, wait, None)
            if waited is None:
                return Response(status_code=204)  # the client left: no one reads this
            seen, refused = waited
            if seen is not None:
                headers = {**(replayed or {}), **({"Retry-After": "1"} if refused else {})}
                return json_answer(seen, status_code=201, headers=headers or None)
        return json_answer(shown.model_dump(mode="json"), status_code=201, headers=replayed)

    @router.get("/v1/runs/{run_id}", response_model=None, responses=answers.documented(200, answers.RunShown))
    async def get_run(
        run_id: uuid.UUID,
        request: Request,
        reader: Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))],
        wait: WaitSeconds = None,
    ) -> Response:
        # Answered by RunReads before routing, unless the request is one it leaves to FastAPI (a wait in a form
        # only pydantic reads, an id not in its canonical text) or the app is served without it.
        return await run_reads.run_answer(request, str(run_id), wait or 0.0, reader)

    @router.get("/v1/runs/{run_id}/transcript", response_model=None)
    async def transcript(
        run_id: uuid.UUID,
        request: Request,
        reader: Annotated[Principal, Depends(requires(Permission.READ_OWN_RUNS))],
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> dict[str, Any] | JSONResponse:
        found = await _views(request).transcript(str(run_id), after, limit, tokens.run_scope(reader))
        if found is None:
            return field_error(404, "path.run_id", f"no run {run_id}")
        return found.body(str(run_id))

    @router.post("/v1/runs/{run_id}/input", status_code=202, response_model=InputTaken)
    async def give_input(
        run_id: uuid.UUID,
        body: InputRequest,
        request: Request,
        caller: Annotated[Principal, Depends(requires(Permission.START_RUNS))],
        idempotency_key: IdempotencyKey,
    ) -> Response:
        """The input a waiting run asked for (`request_input`); the run goes on, on whichever process
        takes it. A caller gives input to its own runs; an operator to any. I18: the input is bound to the
        question it names, else to its Idempotency-Key; the same input again changes nothing."""
        if body.question_id is not None:
            answer = to_question(body.text, caller.name, str(body.question_id))
        elif idempotency_key is not None:
            answer = by_key(body.text, caller.name, idempotency_key)
        else:
            # Bound to nothing, a late or repeated input would answer whatever the run asks next.
            raise RequestError("body.question_id", f"name the question this input answers: GET /v1/runs/{run_id} "
                               "lists what the run waits for, each question with its question_id (or send an "
                               "Idempotency-Key: the input then answers the oldest pending question, bound to "
                               "the key)")  # fmt: skip
        asked = {"run_id": str(run_id), **body.model_dump(mode="json")}

        async def give() -> InputTaken:
            answered = await _engine(request).give_input(str(run_id), answer, tokens.run_scope(caller))
            _refuse_input(answered, answer, str(run_id))
            return InputTaken(id=str(run_id), status=answered.run_status, question_id=answered.question_id)

        return await once(request, "POST /v1/runs/{run_id}/input", caller, idempotency_key, asked, give)

    @router.post("/v1/runs/{run_id}/stop", status_code=202,
                 responses=answers.documented(202, answers.StopRequested))  # fmt: skip
    async def stop_run(
        run_id: uuid.UUID,
        request: Request,
        operator: Annotated[Principal, Depends(requires(Permission.STOP_RUNS))],
        body: StopRequest | None = None,
    ) -> dict[str, Any]:
        status = await _engine(request).request_stop(str(run_id), operator.name)
        return {"id": str(run_id), "stop_requested": True, "status": status.status}

    @router.post("/v1/runs/{run_id}/resume", responses=answers.documented(200, answers.Resumed))
    async def resume_run(
        run_id: uuid.UUID,
        request: Request,
        operator: Annotated[Principal, Depends(requires(Permission.DECIDE_APPROVALS))],
        body: HoldRequest | None = None,
    ) -> dict[str, Any]:
        """I24: a restored run waiting for an operator goes on; the writes it held are sent (the risk theirs)."""
        return await _engine(request).resume_restored(str(run_id), operator.name, body.reason if body else None)

    @router.post("/v1/runs/{run_id}/hold")
    async def hold_run(
        run_id: uuid.UUID,
        request: Request,
        operator: Annotated[Principal, Depends(requires(Permission.HOLD_RUNS))],
        body: HoldRequest | None = None,
    ) -> dict[str, Any]:
        """Keep the run whatever the retention policy says (issue 34), until the hold is released."""
        return await _engine(request).hold(str(run_id), operator.name, body.reason if body else None)

    @router.delete("/v1/runs/{run_id}/hold")
    async def release_run(
        run_id: uuid.UUID,
        request: Request,
        operator: Annotated[Principal, Depends(requires(Permission.HOLD_RUNS))],
        body: HoldRequest | None = None,
    ) -> dict[str, Any]:
        return await _engine(request).release(str(run_id), operator.name, body.reason if body else None)

    @router.get("/v1/approvals", responses=answers.documented(200, answers.Approvals))
    async def approvals(
        request: Request,
        _: Annotated[Principal, Depends(requires(Permission.DECIDE_APPROVALS))],
        status: Literal["pending", "approved", "rejected", "withdrawn"] | None = "pending",
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        return {"approvals": [_approval(a) for a in await _engine(request).approvals(status, limit)]}

    @router.post("/v1/approvals/{approval_id}", response_model=None,
                 responses=answers.documented(200, answers.ApprovalShown))  # fmt: skip
    async def decide(
        approval_id: uuid.UUID,
        body: Decision,
        request: Request,
        operator: Annotated[Principal, Depends(requires(Permission.DECIDE_APPROVALS))],
        idempotency_key: IdempotencyKey,
    ) -> Response:
        async def decide_it() -> dict[str, Any]:
            decided = await _engine(request).decide_approval(
                str(approval_id), body.decision == "approve", operator.name, body.reason or None
            )
            return _approval(decided)

        asked = {"approval_id": str(approval_id), **body.model_dump(mode="json")}
        return await once(request, "POST /v1/approvals/{approval_id}", operator, idempotency_key, asked, decide_it)

    @router.get("/v1/audit")
    async def audit(
        request: Request,
        _: Annotated[Principal, Depends(requires(Permission.READ_AUDIT))],
        run_id: uuid.UUID | None = None,
        action: Annotated[str | None, Query(max_length=200)] = None,
        after: Annotated[int, Query(ge=0, le=2**62)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 500,
    ) -> dict[str, Any]:
        rows = await _views(request).audit_log(str(run_id) if run_id else None, action, after, limit)
        return {"entries": [{"id": r.id, "at": r.at, "action": r.action, "run_id": r.run_id, "actor": r.actor,
                             "detail": r.detail} for r in rows]}  # fmt: skip

    @router.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        p = _proc(request)
        gauges = None
        try:
            # The queues are read at scrape, bounded like /readyz: a database that does not answer leaves
            # them out of this scrape, never hangs it.
            async with asyncio.timeout(READY_WITHIN_S):
                gauges = await p.views.gauges()
        except (StorageError, TimeoutError) as exc:
            log.warning("metrics: the queues could not be read: %s", str(exc) or "no answer within a second")
        text = p.engine.deps.metrics.render(lease_lapses=p.keeper.lapses, gauges=gauges)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    # Answered by the probes middleware first (entries/probes.py); here for the API's description.
    @router.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @router.get("/readyz")
    async def readyz(request: Request) -> Response:
        """200 while this process can reach its database; 503 with the reason, within a second, when not."""
        readiness: probes.Readiness = request.app.state.readiness
        status, body = await readiness.check()
        return Response(body, status_code=status, media_type="application/json")

    gates_api.add_routes(router, _engine)
    auth.add_routes(router, _engine, _token_store)
    copilot.add_routes(router, _views)
    schedules.add_routes(router, _engine)
    hooks.add_routes(router, _engine)
    ticket_events.add_routes(router, _engine)
    teams.add_routes(router, _engine)
    inspector.add_routes(router, _engine)
    jobs.add_routes(router, _engine)
    workflows.add_routes(router, _engine)
    runs_list.add_routes(router, _views)
    timeline.add_routes(router, _views, lambda request: _proc(request).follows)
    a2a.add_routes(router)
    console.add_routes(router, _engine, _views)
    return router


# Made at import, once a process: a route is costly to make (FastAPI reads each handler's signature and
# builds its models: some 50 ms of CPU for this API), the routes depend on nothing an app holds (each
# handler finds its process through `request.app.state`), and every app a process makes includes them.
# A process forked after the import (the tests' fork server) finds them made.
ROUTES = _routes()


def _refuse_input(answered: Answered, answer: Answer, run_id: str) -> None:
    """The refusal of an input that gave nothing and is no repeat (I18). A repeat is answered as the input
    was, with the run's status now."""
    verdict, question = answered.verdict, answered.question_id
    if verdict in (Verdict.GIVEN, Verdict.REPEATED):
        return
    if verdict is Verdict.NO_QUESTION:
        raise NotFound("body.question_id", f"run {run_id} asked no question {question}; GET /v1/runs/{run_id} "
                       "lists the questions it waits for")  # fmt: skip
    if verdict is Verdict.NOT_WAITING:
        raise Conflict("path.run_id", f"run {run_id} is not waiting for input (it is {answered.run_status})")
    if verdict is Verdict.REUSED and answer.question_id is None:
        raise RequestError("header.Idempotency-Key", f"this Idempotency-Key gave run {run_id} another input; "
                           "use a fresh key")  # fmt: skip
    how = "by this token with another input" if verdict is Verdict.REUSED else "by another input"
    raise Conflict("body.question_id", f"question {question} of run {run_id} was answered already, {how}; "
                   "an input answers one question, once")  # fmt: skip


def _approval(approval: Approval) -> dict[str, Any]:
    return approval.shown()
