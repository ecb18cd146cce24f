"""The client's decisions, with no socket: what is sent again and after how long (client/retries.py), what a
refusal says (client/errors.py), and the conversations the shells drive (client/exchange.py,
client/operations.py, client/events.py), each answered here by hand."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from httpx_sse import ServerSentEvent
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.client import errors
from ticketiq.client.events import Told, follow_again_s
from ticketiq.client.exchange import Answer, Conversation, NoAnswer, Pause, Request, answered, sent
from ticketiq.client.operations import create_request, created, run_request, runs_request, waited
from ticketiq.client.retries import Lost, RetryPolicy, backoff_s, delay_s, retry_after_s

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy(attempts=4, base_s=0.25, cap_s=8.0, retry_after_max_s=60.0)
RUN = "6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10"


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
    import json

    raw = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    return Answer(status, raw, "Reason", NOW, {k.lower(): v for k, v in (headers or {}).items()})


def driven(conversation: Conversation[Any], replies: list[Answer | NoAnswer]) -> tuple[Any, list[Any]]:
    """Run a conversation with the answers given in order; its result and what it asked (requests, pauses)."""
    asked: list[Any] = []
    left: Iterator[Answer | NoAnswer] = iter(replies)
    reply: Answer | NoAnswer | None = None
    while True:
        try:
            wanted = conversation.send(reply)
        except StopIteration as done:
            return done.value, asked
        asked.append(wanted)
        reply = None if isinstance(wanted, Pause) else next(left)


# ----- retries.py -----------------------------------------------------------------------------------------


def test_retry_after_is_read_as_seconds_or_as_an_http_date() -> None:
    assert retry_after_s("3", NOW) == 3.0
    assert retry_after_s(" 1.5 ", NOW) == 1.5
    assert retry_after_s(format_datetime(NOW + timedelta(seconds=7), usegmt=True), NOW) == 7.0
    assert retry_after_s(format_datetime(NOW - timedelta(seconds=7), usegmt=True), NOW) == 0.0  # past: at once
    assert retry_after_s("-4", NOW) == 0.0
    for unreadable in (None, "soon", "nan", "inf", ""):
        assert retry_after_s(unreadable, NOW) is None, unreadable


def test_what_is_sent_again() -> None:
    # Never reached the server, or refused unread: anything.
    assert delay_s(POLICY, 1, lost=Lost.NOT_SENT) is not None
    assert delay_s(POLICY, 1, status=429) is not None
    # 503 or a connection cut after the request left: only what is safe to repeat (a read, a keyed POST).
    assert delay_s(POLICY, 1, status=503) is None
    assert delay_s(POLICY, 1, lost=Lost.CUT) is None
    assert delay_s(POLICY, 1, status=503, safe=True) is not None
    assert delay_s(POLICY, 1, lost=Lost.CUT, safe=True) is not None
    # A keyed request still being answered (409 with Retry-After) is asked again; another 409 is an answer.
    assert delay_s(POLICY, 1, status=409, keyed=True, safe=True, asked_s=1.0) == pytest.approx(1.05)
    assert delay_s(POLICY, 1, status=409, keyed=True, safe=True) is None
    for final in (400, 401, 403, 404, 409, 422, 500, 502):
        assert delay_s(POLICY, 1, status=final, safe=True) is None, final


def test_the_tries_are_bounded_and_a_long_retry_after_is_not_waited_out() -> None:
    assert [delay_s(POLICY, n, status=429, jitter=0.0) for n in range(1, 5)] == [0.125, 0.25, 0.5, None]
    assert delay_s(POLICY, 1, status=429, asked_s=61.0) is None
    assert delay_s(RetryPolicy(attempts=1), 1, lost=Lost.NOT_SENT) is None


@given(st.integers(min_value=0, max_value=50), st.floats(min_value=0.0, max_value=0.999))
def test_the_backoff_grows_to_its_cap_and_its_jitter_stays_within_half(retries: int, jitter: float) -> None:
    pause = backoff_s(POLICY, retries, None, jitter)
    ceiling = min(POLICY.cap_s, POLICY.base_s * 2.0**retries)
    assert pause is not None and ceiling / 2 <= pause <= ceiling


@given(st.floats(min_value=0.0, max_value=60.0), st.floats(min_value=0.0, max_value=0.999))
def test_a_retry_after_is_never_shortened_and_at_most_a_tenth_longer(asked: float, jitter: float) -> None:
    pause = backoff_s(POLICY, 3, asked, jitter)
    assert pause is not None and asked <= pause <= asked * 1.1


# ----- errors.py ------------------------------------------------------------------------------------------


def test_a_refusal_names_the_field_and_the_message() -> None:
    import json

    named = errors.refusal(422, json.dumps({"detail": [{"loc": ["body", "agent"], "msg": "too short"}]}).encode(),
                           "Unprocessable Entity")  # fmt: skip
    assert isinstance(named, errors.Invalid) and (named.status, named.field, named.message) == (
        422, "body.agent", "too short"
    )  # fmt: skip
    assert str(named) == "body.agent: too short"
    plain = errors.refusal(409, b'{"detail": "decided already"}', "Conflict")
    assert isinstance(plain, errors.Conflict) and (plain.field, str(plain)) == (None, "decided already")
    text = errors.refusal(502, b"Bad Gateway from the edge", "Bad Gateway")
    assert isinstance(text, errors.ServerError) and text.message == "Bad Gateway from the edge"
    assert errors.refusal(503, b"", "Service Unavailable", 2.0).message == "Service Unavailable"
    kinds = {401: errors.Unauthorized, 403: errors.Forbidden, 404: errors.NotFound, 415: errors.Invalid,
             429: errors.TooMany, 500: errors.ServerError, 418: errors.ApiError}  # fmt: skip
    for status, kind in kinds.items():
        assert type(errors.refusal(status, b"{}", "x")) is kind, status


# ----- exchange.py and operations.py ----------------------------------------------------------------------


def test_a_keyed_post_is_sent_again_with_its_key_after_a_503_and_a_cut() -> None:
    request = create_request("a", "check OPS-1", None, None, "tiq-run-1")
    cut = NoAnswer(Lost.CUT, ConnectionResetError("reset"), "http://api")
    result, asked = driven(answered(request, POLICY), [answer(503, {"detail": "retry"}, {"Retry-After": "2"}),
                                                       cut, answer(201, {"id": RUN, "status": "queued"})])  # fmt: skip
    assert result == {"id": RUN, "status": "queued"}
    sent_again = [a for a in asked if isinstance(a, Request)]
    assert len(sent_again) == 3 and {r.headers["Idempotency-Key"] for r in sent_again} == {"tiq-run-1"}
    pauses = [a.seconds for a in asked if isinstance(a, Pause)]
    assert 2.0 <= pauses[0] <= 2.2 and pauses[1] <= POLICY.base_s * 2


def test_an_unkeyed_post_cut_on_the_way_is_not_sent_again() -> None:
    request = Request("POST", "/v1/runs/x/resume", body={})
    cut = NoAnswer(Lost.CUT, ConnectionResetError("reset"), "http://api")
    with pytest.raises(errors.Unreachable, match="cannot reach the API at http://api"):
        driven(sent(request, POLICY), [cut])


def test_the_last_refusal_is_raised_once_the_tries_are_spent() -> None:
    busy = answer(429, {"detail": [{"loc": ["header", "Authorization"], "msg": "too many streams"}]})
    with pytest.raises(errors.TooMany) as raised:
        driven(sent(run_request(RUN), POLICY), [busy] * POLICY.attempts)
    assert raised.value.field == "header.Authorization"


def test_a_success_without_json_is_a_bad_answer() -> None:
    from ticketiq.client.exchange import BadAnswer

    with pytest.raises(BadAnswer, match="answered 200 without JSON"):
        driven(answered(run_request(RUN), POLICY), [answer(200, b"<html>")])


def clock(*times: float) -> Any:
    """A monotonic clock reading these times in turn, then the last for good."""
    left = list(times)
    return lambda: left.pop(0) if len(left) > 1 else left[0]


def run_body(status: str) -> dict[str, Any]:
    return {"id": RUN, "status": status}


def test_a_wait_asks_again_until_the_run_ended_each_wait_at_most_60_s() -> None:
    conversation = waited(RUN, 150.0, POLICY, clock(0.0, 0.0, 60.0, 60.0, 120.0, 120.0, 150.0))
    result, asked = driven(conversation, [answer(200, run_body("running")), answer(200, run_body("running")),
                                          answer(200, run_body("succeeded"))])  # fmt: skip
    assert result["status"] == "succeeded"
    assert [dict(r.params)["wait"] for r in asked] == ["60", "60", "30"]
    assert [r.read_s for r in asked] == [75.0, 75.0, 45.0]  # each read outlasts its wait


def test_a_wait_ends_when_the_run_waits_for_a_person_or_the_time_is_up() -> None:
    person, _ = driven(waited(RUN, 30.0, POLICY, clock(0.0, 0.0, 1.0)), [answer(200, run_body("waiting"))])
    assert person["status"] == "waiting"
    late, asked = driven(waited(RUN, 5.0, POLICY, clock(0.0, 0.0, 5.0)), [answer(200, run_body("running"))])
    assert late["status"] == "running" and len(asked) == 1


def test_a_wait_refused_for_too_many_waiters_pauses_as_told_then_waits_again() -> None:
    conversation = waited(RUN, 30.0, POLICY, clock(0.0, 0.0, 0.1, 1.1, 2.0))
    result, asked = driven(conversation, [answer(200, run_body("queued"), {"Retry-After": "1"}),
                                          answer(200, run_body("succeeded"))])  # fmt: skip
    assert result["status"] == "succeeded"
    assert [type(a).__name__ for a in asked] == ["Request", "Pause", "Request"] and asked[1].seconds == 1.0


def test_a_create_that_waits_goes_on_waiting_past_the_posts_own_60_s() -> None:
    conversation = created(
        "a", "check OPS-2", True, 90.0, "tiq-run-2", POLICY, clock(0.0, 60.0, 60.0, 60.0, 60.0, 90.0)
    )
    result, asked = driven(conversation, [answer(201, run_body("running")), answer(200, run_body("succeeded"))])
    post, get = asked
    assert (post.method, dict(post.params)["wait"], post.body) == ("POST", "60", {"agent": "a", "input": "check OPS-2",
                                                                                  "may_wait": True})  # fmt: skip
    assert (get.method, get.path, dict(get.params)["wait"]) == ("GET", f"/v1/runs/{RUN}", "30")
    assert result["status"] == "succeeded"


def test_a_create_that_waits_no_time_is_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="give more than 0"):
        driven(created("a", "check OPS-3", None, 0.0, "tiq-run-3", POLICY), [])


def test_the_list_query_is_sent_as_the_api_reads_it() -> None:
    request = runs_request({"status": ["running", "waiting"], "held": False, "agent": None, "limit": 2}, "c1")
    assert request.params == (("status", "running"), ("status", "waiting"), ("held", "false"), ("limit", "2"),
                              ("cursor", "c1"))  # fmt: skip
    assert request.safe and request.key is None


# ----- events.py ------------------------------------------------------------------------------------------


def test_a_stream_tells_its_events_with_the_id_to_follow_on_from() -> None:
    told = Told()
    assert told.heard(ServerSentEvent(event="", data="", id="", retry=2500)) is None
    step = told.heard(ServerSentEvent(event="step", data='{"step": 1}', id="7:1"))
    assert step is not None and (step.event, step.data, step.id) == ("step", {"step": 1}, "7:1")
    assert (told.last_id, told.retry_s, told.ended) == ("7:1", 2.5, False)
    end = told.heard(ServerSentEvent(event="end", data='{"status": "succeeded"}', id="9:0"))
    assert end is not None and told.ended and told.last_id == "9:0"


def test_a_stream_is_followed_again_unless_it_told_the_end() -> None:
    assert follow_again_s(Told(ended=True), 0, POLICY, 0.5) is None
    assert follow_again_s(Told(all_told=True), 0, POLICY, 0.5) is None
    assert follow_again_s(Told(retry_s=1.0), 0, POLICY, 0.5) == 1.0  # closed by the server: its retry
    assert follow_again_s(Told(cut=True), 1, POLICY, 0.0) == POLICY.base_s / 2
    assert follow_again_s(Told(cut=True), POLICY.attempts, POLICY, 0.0) is None  # cut too often: raised


# ----- the two shells -------------------------------------------------------------------------------------


def test_the_two_shells_offer_the_same_operations_with_the_same_parameters() -> None:
    import inspect

    from ticketiq.client import AsyncClient, Client

    def operations(cls: type) -> dict[str, list[str]]:
        return {name: list(inspect.signature(member).parameters) for name, member in vars(cls).items()
                if callable(member) and not name.startswith("_")}  # fmt: skip

    sync, aio = operations(Client), operations(AsyncClient)
    assert sync == aio
    assert {"create", "wait", "runs", "follow", "give_input", "decide", "timeline"} <= set(sync)


def test_the_client_imports_none_of_the_server() -> None:
    """A user's program imports `ticketiq.client` with httpx alone: no web framework, driver or validation."""
    import subprocess
    import sys

    loaded = subprocess.run([sys.executable, "-c", "import sys, ticketiq.client; print(' '.join(sys.modules))"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.split()  # fmt: skip
    assert "ticketiq.client.sync" in loaded and "httpx" in loaded
    heavy = {"fastapi", "starlette", "pydantic", "psycopg", "openai", "aiohttp", "ticketiq.settings", "ticketiq.engine"}
    assert not heavy & set(loaded), heavy & set(loaded)
