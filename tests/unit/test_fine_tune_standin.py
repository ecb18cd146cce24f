"""The OpenAI fine-tuning stand-in's pure parts: a job's status as a function of time, the training
file check OpenAI makes, the model name a job gets, and the `metadata[k]=v` list filter."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.standins.fine_tuning import (
    Status,
    fine_tuned_name,
    metadata_filter,
    metadata_key,
    timeline,
    training_problem,
)


@pytest.mark.parametrize(
    ("elapsed_s", "status", "finished_after_s"),
    [
        (0.0, Status.VALIDATING_FILES, None),
        (0.9, Status.VALIDATING_FILES, None),
        (1.0, Status.QUEUED, None),
        (1.9, Status.QUEUED, None),
        (2.0, Status.RUNNING, None),
        (9.9, Status.RUNNING, None),
        (10.0, Status.SUCCEEDED, 10.0),
        (500.0, Status.SUCCEEDED, 10.0),
    ],
)
def test_a_job_validates_queues_runs_and_succeeds_over_its_duration(
    elapsed_s: float, status: Status, finished_after_s: float | None
) -> None:
    moment = timeline(elapsed_s, 10.0, fails=False, cancelled_after_s=None)
    assert (moment.status, moment.finished_after_s) == (status, finished_after_s)


def test_a_failing_job_fails_once_its_files_are_validated() -> None:
    assert timeline(0.5, 10.0, fails=True, cancelled_after_s=None).status is Status.VALIDATING_FILES
    failed = timeline(1.0, 10.0, fails=True, cancelled_after_s=None)
    assert (failed.status, failed.finished_after_s) == (Status.FAILED, 1.0)


def test_a_cancel_stops_a_job_where_it_was_and_none_after_it_ended() -> None:
    cancelled = timeline(50.0, 10.0, fails=False, cancelled_after_s=4.0)
    assert (cancelled.status, cancelled.finished_after_s) == (Status.CANCELLED, 4.0)
    assert timeline(3.0, 10.0, fails=False, cancelled_after_s=4.0).status is Status.RUNNING  # not yet
    assert timeline(50.0, 10.0, fails=False, cancelled_after_s=12.0).status is Status.SUCCEEDED


@given(
    st.floats(min_value=0, max_value=1e4),
    st.floats(min_value=0.01, max_value=1e3),
    st.booleans(),
    st.one_of(st.none(), st.floats(min_value=0, max_value=1e4)),
)
def test_a_job_ends_once_and_stays_ended(elapsed: float, duration: float, fails: bool, cancel: float | None) -> None:
    now = timeline(elapsed, duration, fails, cancel)
    later = timeline(elapsed + 1.0, duration, fails, cancel)
    if now.finished_after_s is not None:
        assert later == now
        assert now.finished_after_s <= elapsed
    else:
        assert now.status in (Status.VALIDATING_FILES, Status.QUEUED, Status.RUNNING)


def lines(count: int) -> bytes:
    example = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    return b"".join(json.dumps(example).encode() + b"\n" for _ in range(count))


def test_a_chat_jsonl_file_of_ten_examples_trains() -> None:
    assert training_problem(lines(10)) == (10, None)
    assert training_problem(lines(10) + b"\n\n") == (10, None)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (lines(9), "Training file has 9 example(s), but must have at least 10 examples."),
        (lines(3) + b"not json\n", "Line 4 of the training file is not valid JSON."),
        (b'{"prompt": "p", "completion": "c"}\n', "Line 1: each example must have a non-empty `messages` list."),
        (b'{"messages": [{"role": "user", "content": "q"}]}\n', "Line 1: an example needs at least one assistant"),
        (b'{"messages": [{"role": "robot"}]}\n', "Line 1: a message has no valid role."),
        (b"\xff\xfe", "The training file is not UTF-8 encoded."),
    ],
)
def test_a_file_openai_would_not_train_on_says_why(content: bytes, says: str) -> None:
    _, error = training_problem(content)
    assert error is not None
    assert error["code"] == "invalid_training_file"
    assert error["param"] == "training_file"
    assert error["message"].startswith(says)


def test_the_fine_tuned_model_is_named_after_base_organisation_suffix_and_job() -> None:
    assert fine_tuned_name("gpt-4o-mini-2024-07-18", None, "ftjob-abcdefghXYZ") == (
        "ft:gpt-4o-mini-2024-07-18:ticketiq::abcdefgh"
    )
    assert fine_tuned_name("gpt-4o-mini", "triage", "ftjob-12345678") == "ft:gpt-4o-mini:ticketiq:triage:12345678"
    # Training a fine-tuned model further names the base it came from.
    assert fine_tuned_name("ft:gpt-4o-mini:ticketiq:triage:12345678", "v2", "ftjob-87654321") == (
        "ft:gpt-4o-mini:ticketiq:v2:87654321"
    )


def test_metadata_filters_and_write_keys() -> None:
    query = [("limit", "20"), ("metadata[ticketiq_job]", "j-1"), ("metadata[team]", "ops"), ("after", "x")]
    assert metadata_filter(query) == {"ticketiq_job": "j-1", "team": "ops"}
    assert metadata_filter([("limit", "20"), ("metadata", "null")]) is None
    assert metadata_key({"team": "ops", "ticketiq_job": "j-1"}) == "team=ops&ticketiq_job=j-1"
    assert metadata_key(None) is None
    assert metadata_key({}) is None
