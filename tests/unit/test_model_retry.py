"""The model client's pure decisions, no server: how long to wait before a retry (Retry-After in its
forms, the jittered backoff and its bounds) and how a reply's tool-call arguments are read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.model.client import (
    RETRY_AFTER_MAX_S,
    backoff_s,
    parse_arguments,
    parse_retry_after,
    reply_from_completion,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def test_retry_after_in_seconds_milliseconds_and_http_dates() -> None:
    assert parse_retry_after({"retry-after": "3"}, NOW) == 3.0
    assert parse_retry_after({"retry-after": "0.5"}, NOW) == 0.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}, NOW) == 0.25
    later = format_datetime(NOW + timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"retry-after": later}, NOW) == 7.0
    earlier = format_datetime(NOW - timedelta(seconds=7), usegmt=True)
    assert parse_retry_after({"retry-after": earlier}, NOW) == 0.0
    assert parse_retry_after({"retry-after": "soon"}, NOW) is None
    assert parse_retry_after({"retry-after": "-4"}, NOW) == 0.0
    assert parse_retry_after({}, NOW) is None


@given(st.integers(min_value=0, max_value=30), st.floats(min_value=0, max_value=1, exclude_max=True))
def test_backoff_grows_is_jittered_and_bounded(retries_taken: int, jitter: float) -> None:
    wait = backoff_s(retries_taken, None, jitter)
    assert wait is not None
    ceiling = min(8.0, 0.25 * 2**retries_taken)
    assert ceiling / 2 <= wait <= ceiling


@given(
    st.floats(min_value=0, max_value=RETRY_AFTER_MAX_S),
    st.floats(min_value=0, max_value=1, exclude_max=True),
)
def test_retry_after_is_never_undercut(retry_after: float, jitter: float) -> None:
    wait = backoff_s(0, retry_after, jitter)
    assert wait is not None
    assert retry_after <= wait <= retry_after * 1.1


def test_a_retry_after_beyond_the_bound_is_not_waited_out() -> None:
    assert backoff_s(0, RETRY_AFTER_MAX_S + 1, 0.5) is None


def test_arguments_that_are_not_an_object_are_reported() -> None:
    assert parse_arguments('{"issue_key": "OPS-1"}') == ({"issue_key": "OPS-1"}, None)
    assert parse_arguments("") == ({}, None)
    assert parse_arguments("[1, 2]") == ({}, "arguments are JSON list, not an object")
    arguments, error = parse_arguments('{"issue_key": ')
    assert arguments == {}
    assert error is not None
    assert error.startswith("arguments are not valid JSON")


def test_a_reply_keeps_the_arguments_string_the_model_sent() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "t", "arguments": "[1]"},
                        }
                    ],
                },
            }
        ],
    }
    reply = reply_from_completion(completion, "m", 0.01)
    [call] = reply.tool_calls
    assert call.arguments == {}
    assert call.arguments_error == "arguments are JSON list, not an object"
    assert reply.message["tool_calls"][0]["function"]["arguments"] == "[1]"
    assert (reply.prompt_tokens, reply.completion_tokens) == (0, 0)
