"""`Idempotency-Key` on every API POST that creates something: runs, inputs, decisions, co-pilot turns,
tokens. A route takes the header as `IdempotencyKey` and wraps what it does in `once` (all but
`POST /v1/runs`, whose run carries its key: see the end):

    @app.post("/v1/runs/{run_id}/input", status_code=202, response_model=InputTaken)
    async def give_input(
        run_id: uuid.UUID, body: InputRequest, request: Request,
        caller: Annotated[Principal, Depends(requires(Permission.START_RUNS))], key: IdempotencyKey,
    ) -> Response:
        asked = {"run_id": str(run_id), **body.model_dump(mode="json")}
        return await once(request, "POST /v1/runs/{run_id}/input", caller, key, asked,
                          lambda: engine(request).give_input(str(run_id), body.text, caller.name))

- `scope` is the route as declared; `principal` the acting token: a key is its token's own, and is no
  way to reach another token's request.
- `asked` is what identifies the request, as JSON: the path's ids and the body. A key stays bound to
  the request it was first used for.
- `answer` does the work and returns what the route answers: a model, a dict, or a `Response`. Only
  the status and the JSON body are kept, never headers. Success is the route's `status_code`.
- `kept_as`, for an answer that must not be stored (it holds a secret): given what `answer` returned,
  the response repeats get instead (kept and replayed like any answer).

What a request gets:

| the key | the answer |
| --- | --- |
| no header | `answer()`'s, nothing stored |
| malformed (empty, over 255 characters, not printable ASCII) | 422 naming the header |
| first use | `answer()`'s; a 2xx is kept for repeats; anything else (or an exception) frees the key for a retry |
| used for this request, answered | the kept answer byte for byte, with `Idempotent-Replayed: true` |
| used for this request, being answered | 409 naming the header, with Retry-After |
| used for this request, whose process died or which overran its claim (60 s) | the key is taken over and answered |
| used for another request | 422 naming the header |

Keys are kept TICKETIQ_IDEMPOTENCY_TTL_S (at least a day) after their answer; the leader purges them.

Wrapping a route:
- Annotate it `-> Response` and name its model in the decorator (`response_model=`) for the OpenAPI.
- Keep `scope` stable: another string forgets every key given under the old one.
- An answer that varies (200 with the answer, 202 while still working) returns a `JSONResponse` for
  the other status; a repeat gets the first answer, whatever happened since (a run's status included).
- `answer` must finish well within the claim (`intake.idempotency.CLAIM_S`, 60 s): past it a repeat may
  take the key over and answer it a second time.
- A route whose thing carries its own key, atomic with its making (a run's `runs.idempotency_key`),
  keeps it: it still dedupes after a crash between the making and the keeping, and after the purge.
  `POST /v1/runs` needs nothing more, and takes no `once` (no claim, no finish: two statements fewer a
  run): a repeat is answered from the run row, found durable (I20), as the table says but for "being
  answered", which cannot happen (the run and its key are one commit), and a crash between the making
  and the answer is answered as a repeat. Its answer is the run and the status it was made with (the
  `agent.run.created` audit row keeps it), so a repeat gets the first answer byte for byte.
- Any other route that makes something must find it again when its process died after the making and
  before the keeping (the retry takes the key over and answers again, I19): derive the thing's id from
  the token and the key (`jobs.queue.job_id`, `scheduler.schedule_id`), answer a repeat of a decision
  with the decision as it stands, never send a write again (`POST /v1/inspector/calls`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from fastapi.encoders import jsonable_encoder
from starlette.responses import JSONResponse, Response

from ticketiq.auth.tokens import Principal
from ticketiq.errors import RequestError, StorageError
from ticketiq.intake import idempotency
from ticketiq.intake.idempotency import KeyRow, Verdict
from ticketiq.process import AppProcess
from ticketiq.storage.idempotency_store import Claim, IdempotencyStore, KeyRef, StoredKey

log = logging.getLogger(__name__)

HEADER = "Idempotency-Key"
REPLAYED = "Idempotent-Replayed"
# A claim that changes under a request this often (freed, taken, freed again) is answered 409.
CLAIM_TRIES = 5


async def _idempotency_key(
    value: Annotated[
        str | None,
        Header(alias=HEADER, description="Makes a repeat of this request return its first answer (kept a day)."),
    ] = None,
) -> str | None:
    if value is not None and (problem := idempotency.key_problem(value)) is not None:
        raise RequestError(f"header.{HEADER}", problem)
    return value


# The request's Idempotency-Key, checked (422 naming the header when malformed); None without one.
IdempotencyKey = Annotated[str | None, Depends(_idempotency_key)]


def header_error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The house error shape, naming the header."""
    return JSONResponse({"detail": [{"loc": ["header", HEADER], "msg": message}]}, status_code=status, headers=headers)


async def once(
    request: Request,
    scope: str,
    principal: Principal,
    key: str | None,
    asked: Any,
    answer: Callable[[], Awaitable[Any]],
    *,
    kept_as: Callable[[Any], Response] | None = None,
) -> Response:
    """Answer the request once per key: see the module's table."""
    route = request.scope.get("route")
    success = getattr(route, "status_code", None) or 200
    if key is None:
        return _response(await answer(), success)
    process: AppProcess = request.app.state.process
    store = IdempotencyStore(process.db)
    ref = KeyRef(scope, principal.name, key)
    found = await _claim(store, ref, idempotency.request_hash(asked), process.engine.deps.holder)
    if not isinstance(found, Claim):
        return found
    try:
        result = await answer()
    except BaseException:
        await _release(store, found)
        raise
    response = _response(result, success)
    if not idempotency.worth_keeping(response.status_code):
        await _release(store, found)
        return response
    kept = response if kept_as is None else kept_as(result)
    try:
        if not await store.finish(found, kept.status_code, bytes(kept.body).decode(), _run_of(request, result)):
            log.warning("%s by %s: the key was taken over while this request was answered; the taker's answer is kept",
                        scope, principal.name)  # fmt: skip
    except StorageError as exc:
        # Made, and answered, but not kept: a repeat after the claim lapses answers again.
        log.error("%s by %s: the answer was not kept for repeats: %s", scope, principal.name, exc)
    return response


def _run_of(request: Request, result: Any) -> str | None:
    """The run an answer is about (the path's run, or the run a turn made), so that its key goes with it
    when the retention pass purges the run."""
    named = request.path_params.get("run_id") or getattr(result, "run_id", None)
    return None if named is None else str(named)


async def _claim(store: IdempotencyStore, ref: KeyRef, request_hash: str, holder: str) -> Claim | Response:
    """This request's claim on the key, or the answer a repeat gets."""
    for _ in range(CLAIM_TRIES):
        claim = await store.claim(ref, request_hash, holder, idempotency.CLAIM_S)
        if claim is not None:
            return claim
        row = await store.get(ref)  # I20: only once the row is on the synchronous standby
        if row is None:  # freed between the two statements: claim it again
            continue
        verdict = idempotency.decide(_key_row(row), request_hash, row.now)
        if verdict is Verdict.REPLAY:
            assert row.response is not None and row.status_code is not None  # a done row has both
            return Response(row.response.encode(), row.status_code, {REPLAYED: "true"}, "application/json")
        if verdict is Verdict.DIFFERENT:
            return header_error(422, f"this {HEADER} was used with a different request; use a fresh key")
        if verdict is Verdict.TAKE_OVER:
            taken = await store.take_over(ref, request_hash, holder, idempotency.CLAIM_S)
            if taken is not None:
                log.warning("%s by %s: took over the key from %s, which no longer answers it", ref.scope,
                            ref.principal, row.holder)  # fmt: skip
                return taken
            continue
        if verdict is Verdict.WORKING:
            break
    return header_error(409, f"a request with this {HEADER} is still being answered; retry in a moment",
                        {"Retry-After": "1"})  # fmt: skip


def _key_row(row: StoredKey) -> KeyRow:
    return KeyRow(row.request_hash, row.state, row.expires_at, row.holder_alive)


async def _release(store: IdempotencyStore, claim: Claim) -> None:
    """Free the key after a refusal or a failure. Should that fail too, the claim lapses on its own."""
    try:
        await store.release(claim)
    except Exception as exc:
        log.error("%s by %s: the key was not freed (%s); a retry with it may take it over in %g s",
                  claim.ref.scope, claim.ref.principal, exc, idempotency.CLAIM_S)  # fmt: skip


def _response(result: Any, status_code: int) -> Response:
    if isinstance(result, Response):
        return result
    return JSONResponse(jsonable_encoder(result), status_code=status_code)
