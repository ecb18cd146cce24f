"""Each operation of the client as its request, and the conversations of more than one request: waiting for
a run (`?wait=S` again until the run ended, waits for a person, or the caller's time is up) and a create that
waits. Pure: the shells drive them (`exchange.py`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast
from urllib.parse import quote

from ticketiq.client import models
from ticketiq.client.exchange import Conversation, Pause, Request, answered, sent
from ticketiq.client.retries import RetryPolicy

# What one `?wait=S` may ask (entries/run_wait.py); a longer wait is several.
WAIT_MAX_S = 60.0
# A waiting request's answer may take its wait and this much more before the connection is given up.
WAIT_READ_MARGIN_S = 15.0
ENDED = frozenset({"succeeded", "failed", "interrupted", "stopped"})
Clock = Callable[[], float]


def done_waiting(status: str) -> bool:
    """Whether a wait for the run is over: it ended, or waits for a person (input, an approval)."""
    return status in ENDED or status == "waiting"


def fresh_key(what: str) -> str:
    """An Idempotency-Key made once per call and kept across its retries."""
    return f"tiq-{what}-{uuid.uuid4()}"


def _id(value: str) -> str:
    return quote(str(value), safe="")


def _params(given: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Query parameters as text, a None left out, a list repeated, a bool as `true`/`false`."""
    pairs = given.items() if isinstance(given, Mapping) else given
    out: list[tuple[str, str]] = []
    for name, value in pairs:
        for one in value if isinstance(value, list | tuple) else [value]:
            if one is not None:
                out.append((name, ("true" if one else "false") if isinstance(one, bool) else str(one)))
    return tuple(out)


def _waiting(wait_s: float | None) -> tuple[tuple[str, str], ...]:
    return () if not wait_s or wait_s <= 0 else (("wait", f"{min(wait_s, WAIT_MAX_S):.3f}".rstrip("0").rstrip(".")),)


def _read_s(wait_s: float | None) -> float | None:
    return None if not wait_s else min(wait_s, WAIT_MAX_S) + WAIT_READ_MARGIN_S


def create_request(agent: str, text: str, may_wait: bool | None, wait_s: float | None, key: str) -> Request:
    body: dict[str, Any] = {"agent": agent, "input": text}
    if may_wait is not None:
        body["may_wait"] = may_wait
    return Request("POST", "/v1/runs", _waiting(wait_s), body, key=key, read_s=_read_s(wait_s))


def run_request(run_id: str, wait_s: float | None = None) -> Request:
    return Request("GET", f"/v1/runs/{_id(run_id)}", _waiting(wait_s), safe=True, read_s=_read_s(wait_s))


def runs_request(query: Mapping[str, Any], cursor: str | None) -> Request:
    return Request("GET", "/v1/runs", _params({**query, "cursor": cursor}), safe=True)


def timeline_request(run_id: str) -> Request:
    return Request("GET", f"/v1/runs/{_id(run_id)}/timeline", safe=True)


def transcript_request(run_id: str, after: int, limit: int) -> Request:
    return Request("GET", f"/v1/runs/{_id(run_id)}/transcript", _params({"after": after, "limit": limit}), safe=True)


def input_request(run_id: str, text: str, question_id: str | None, key: str) -> Request:
    body = {"text": text} if question_id is None else {"text": text, "question_id": question_id}
    return Request("POST", f"/v1/runs/{_id(run_id)}/input", body=body, key=key)


def stop_request(run_id: str) -> Request:
    # Asked twice, a stop is asked once: safe to send again.
    return Request("POST", f"/v1/runs/{_id(run_id)}/stop", body={}, safe=True)


def resume_request(run_id: str, reason: str | None) -> Request:
    return Request("POST", f"/v1/runs/{_id(run_id)}/resume", body={"reason": reason} if reason else {})


def approvals_request(status: str | None, limit: int) -> Request:
    return Request("GET", "/v1/approvals", _params({"status": status, "limit": limit}), safe=True)


def decide_request(approval_id: str, approve: bool, reason: str | None, key: str) -> Request:
    body = {"decision": "approve" if approve else "reject", "reason": reason or ""}
    return Request("POST", f"/v1/approvals/{_id(approval_id)}", body=body, key=key)


def job_request(job_id: str) -> Request:
    return Request("GET", f"/v1/jobs/{_id(job_id)}", safe=True)


def jobs_request(status: str | None, kind: str | None, limit: int) -> Request:
    return Request("GET", "/v1/jobs", _params({"status": status, "kind": kind, "limit": limit}), safe=True)


def waited(run_id: str, timeout_s: float, policy: RetryPolicy, clock: Clock = time.monotonic) -> Conversation[
        models.RunShown]:  # fmt: skip
    """The run once it ended or waits for a person, or as it is when `timeout_s` passed: `?wait=S` again
    and again, S at most 60. A process holding too many waits answers at once with Retry-After: the
    next asks after that pause."""
    deadline = clock() + timeout_s
    while True:
        answer = yield from sent(run_request(run_id, max(0.0, deadline - clock())), policy)
        shown = cast(models.RunShown, answer.json())
        left = deadline - clock()
        if done_waiting(shown["status"]) or left <= 0:
            return shown
        asked = answer.retry_after_s
        if asked is not None:
            yield Pause(min(asked, left))


def created(
    agent: str, text: str, may_wait: bool | None, wait_s: float, key: str, policy: RetryPolicy,
    clock: Clock = time.monotonic,
) -> Conversation[models.RunShown]:  # fmt: skip
    """A run made, then waited for as `waited` does, `wait_s` in all: the first wait is the POST's own."""
    if not wait_s > 0:  # a POST without a wait answers {id, status} only, not the run
        raise ValueError(f"wait: {wait_s!r} seconds; give more than 0, or no wait")
    deadline = clock() + wait_s
    answer = yield from sent(create_request(agent, text, may_wait, wait_s, key), policy)
    shown = cast(models.RunShown, answer.json())
    left = deadline - clock()
    if done_waiting(shown["status"]) or left <= 0:
        return shown
    asked = answer.retry_after_s
    if asked is not None:
        yield Pause(min(asked, left))
    return (yield from waited(shown["id"], max(0.0, deadline - clock()), policy, clock))


def made(agent: str, text: str, may_wait: bool | None, key: str, policy: RetryPolicy) -> Conversation[
        models.RunCreated]:  # fmt: skip
    return cast(models.RunCreated, (yield from answered(create_request(agent, text, may_wait, None, key), policy)))
