"""The fine-tuning job's pure parts, with no I/O: its params (a bad one is a 422 naming
`body.params.<field>`), the training file it uploads, how a request in doubt is settled (I14), and its
progress."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.agents.catalog import parse
from ticketiq.engine.engine import Engine
from ticketiq.errors import RequestError
from ticketiq.jobs import fine_tune, in_doubt, training_file
from ticketiq.jobs.in_doubt import Mark, Next, Sent
from ticketiq.jobs.kinds import kind

CATALOG = parse({"agents": {"triage": {"system_prompt": "You triage.", "owner": "ops-bot"}}}, "test")
ENGINE = cast(Engine, SimpleNamespace(deps=SimpleNamespace(catalog=CATALOG)))


def example(n: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Issue {n}"}, {"role": "assistant", "content": f"label-{n}"}]}


EXAMPLES = [example(n) for n in range(10)]


def refused(params: dict[str, Any]) -> str:
    with pytest.raises(RequestError) as caught:
        fine_tune.check(params, ENGINE)
    assert caught.value.status == 422
    return caught.value.field


def test_the_kind_is_resumable_and_counts_steps() -> None:
    found = kind("fine_tune")
    assert found is fine_tune.KIND
    assert (found.name, found.resumable, found.unit, found.internal) == ("fine_tune", True, "steps", False)


def test_good_params_come_back_normalised_with_their_defaults() -> None:
    checked = fine_tune.check(
        {"model": " gpt-4o-mini-2024-07-18 ", "training": {"examples": EXAMPLES, "agent": "triage"}}, ENGINE
    )
    assert checked == {
        "model": "gpt-4o-mini-2024-07-18",
        "training": {"agent": "triage", "examples": EXAMPLES},
        "suffix": None,
        "poll_s": fine_tune.POLL_S,
    }
    knowledge = fine_tune.check(
        {"model": "m", "training": {"knowledge": {"project": "OPS"}}, "suffix": "triage-v2", "poll_s": 1}, ENGINE
    )
    assert knowledge["training"] == {"knowledge": {"project": "OPS", "limit": training_file.KNOWLEDGE_LIMIT}}
    assert (knowledge["suffix"], knowledge["poll_s"]) == ("triage-v2", 1.0)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"training": {"examples": EXAMPLES}}, "body.params.model"),
        ({"model": "", "training": {"examples": EXAMPLES}}, "body.params.model"),
        ({"model": 7, "training": {"examples": EXAMPLES}}, "body.params.model"),
        ({"model": "m"}, "body.params.training"),
        ({"model": "m", "training": []}, "body.params.training"),
        ({"model": "m", "training": {}}, "body.params.training"),
        ({"model": "m", "training": {"examples": EXAMPLES, "knowledge": {"project": "OPS"}}}, "body.params.training"),
        ({"model": "m", "training": {"examples": EXAMPLES, "extra": 1}}, "body.params.training.extra"),
        ({"model": "m", "training": {"examples": EXAMPLES[:9]}}, "body.params.training.examples"),
        ({"model": "m", "training": {"examples": "lots"}}, "body.params.training.examples"),
        (
            {"model": "m", "training": {"examples": [*EXAMPLES, {"messages": []}]}},
            "body.params.training.examples.10.messages",
        ),
        (
            {
                "model": "m",
                "training": {"examples": [*EXAMPLES[:9], {"messages": [{"role": "robot", "content": "x"}]}]},
            },
            "body.params.training.examples.9.messages.0.role",
        ),
        (
            {"model": "m", "training": {"examples": [{"messages": [{"role": "user", "content": None}]}, *EXAMPLES]}},
            "body.params.training.examples.0.messages.0.content",
        ),
        (
            {"model": "m", "training": {"examples": [{"messages": [{"role": "user", "content": "q"}]}, *EXAMPLES]}},
            "body.params.training.examples.0.messages",
        ),
        ({"model": "m", "training": {"examples": EXAMPLES, "agent": "nobody"}}, "body.params.training.agent"),
        ({"model": "m", "training": {"knowledge": {"project": "ops"}}}, "body.params.training.knowledge.project"),
        ({"model": "m", "training": {"knowledge": {}}}, "body.params.training.knowledge.project"),
        ({"model": "m", "training": {"knowledge": "OPS"}}, "body.params.training.knowledge"),
        (
            {"model": "m", "training": {"knowledge": {"project": "OPS", "limit": 5}}},
            "body.params.training.knowledge.limit",
        ),
        (
            {"model": "m", "training": {"knowledge": {"project": "OPS", "limit": True}}},
            "body.params.training.knowledge.limit",
        ),
        (
            {"model": "m", "training": {"knowledge": {"project": "OPS", "since": 1}}},
            "body.params.training.knowledge.since",
        ),
        ({"model": "m", "training": {"examples": EXAMPLES}, "suffix": "a:b"}, "body.params.suffix"),
        ({"model": "m", "training": {"examples": EXAMPLES}, "suffix": "x" * 65}, "body.params.suffix"),
        ({"model": "m", "training": {"examples": EXAMPLES}, "poll_s": 0}, "body.params.poll_s"),
        ({"model": "m", "training": {"examples": EXAMPLES}, "poll_s": "5"}, "body.params.poll_s"),
        ({"model": "m", "training": {"examples": EXAMPLES}, "epochs": 3}, "body.params.epochs"),
    ],
)
def test_bad_params_are_refused_naming_the_field(params: dict[str, Any], field: str) -> None:
    assert refused(params) == field


def test_the_training_file_is_chat_jsonl_with_the_agent_prompt_first() -> None:
    given_system = {"messages": [{"role": "system", "content": "Own."}, *example(1)["messages"]]}
    content = training_file.training_jsonl([example(0), given_system], "You triage.")
    lines = [json.loads(line) for line in content.decode().splitlines()]
    assert lines == [
        {"messages": [{"role": "system", "content": "You triage."}, *example(0)["messages"]]},
        given_system,  # an example with its own system message keeps it
    ]
    assert content.endswith(b"\n")
    assert training_file.training_jsonl([example(0)], "You triage.") == content.splitlines(keepends=True)[0]


def test_the_training_file_keeps_text_as_text() -> None:
    text = 'Café "ünïcode" \u2603'
    line = training_file.training_jsonl([{"messages": [{"role": "assistant", "content": text}]}])
    assert json.loads(line)["messages"][0]["content"] == text
    assert "\u2603".encode() in line  # UTF-8, not \\u escapes


def test_knowledge_issues_with_labels_become_examples() -> None:
    issues = [
        {"key": "OPS-1", "title": "Login fails", "body": "Since 9am.", "labels": ["auth", "urgent", "auth"]},
        {"key": "OPS-2", "title": "No labels", "body": "x", "labels": []},
        {"key": "OPS-3", "title": "", "body": "", "labels": ["billing"]},
    ]
    assert training_file.knowledge_examples(issues) == [
        {"messages": [{"role": "user", "content": "Login fails\n\nSince 9am."},
                      {"role": "assistant", "content": "auth, urgent"}]},
        {"messages": [{"role": "user", "content": "OPS-3"}, {"role": "assistant", "content": "billing"}]},
    ]  # fmt: skip
    assert training_file.too_few(9, "OPS") == "OPS gave only 9 usable examples; OpenAI trains on 10 or more"
    assert training_file.too_few(10, "OPS") is None


def test_the_file_name_carries_the_job_id() -> None:
    assert training_file.file_name("5f0c") == "ticketiq-fine-tune-5f0c.jsonl"


@pytest.mark.parametrize(
    ("status", "sent"),
    [
        (200, Sent.MADE),
        (None, Sent.IN_DOUBT),
        (500, Sent.IN_DOUBT),
        (502, Sent.IN_DOUBT),
        (408, Sent.IN_DOUBT),
        (429, Sent.NOT_TAKEN),
        (400, Sent.REFUSED),
        (401, Sent.REFUSED),
        (404, Sent.REFUSED),
    ],
)
def test_what_an_answer_says_became_of_a_send(status: int | None, sent: Sent) -> None:
    assert in_doubt.sent_as(status) is sent


NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def test_a_mark_is_read_from_the_state_as_the_mark_statement_writes_it() -> None:
    stored = {"in_flight_until": "2026-05-01T12:00:10.5+00:00", "attempt": 2}
    assert Mark.of(stored) == Mark(NOW + timedelta(seconds=10.5), 2)
    assert Mark.of(None) is None
    assert Mark.of({"id": "file-x"}) is None


@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False))
def test_a_request_in_doubt_is_looked_up_only_once_it_cannot_be_in_flight(offset_s: float) -> None:
    mark = Mark(NOW + timedelta(seconds=offset_s), 1)
    wait = in_doubt.wait_before_look_s(mark, NOW)
    assert wait >= 0
    assert wait == pytest.approx(max(0.0, offset_s), abs=1e-5)
    # Having waited it out, the next look by the same clock says: look now.
    assert in_doubt.wait_before_look_s(mark, NOW + timedelta(seconds=wait)) == 0


@pytest.mark.parametrize(
    ("found", "sends", "max_sends", "decided"),
    [
        ("ftjob-1", 0, 3, Next.USE),
        ("ftjob-1", 3, 3, Next.USE),  # found wins even when no send is left
        (None, 0, 3, Next.SEND),
        (None, 2, 3, Next.SEND),
        (None, 3, 3, Next.GIVE_UP),
    ],
)
def test_after_a_look_a_found_object_is_used_and_an_absent_one_sent_once_more(
    found: str | None, sends: int, max_sends: int, decided: Next
) -> None:
    assert in_doubt.after_look(found, sends, max_sends) is decided


@pytest.mark.parametrize(
    ("state", "done"),
    [
        ({}, 0),
        ({"upload": {"in_flight_until": "2026-05-01T12:00:00+00:00"}}, 0),
        ({"file": {"id": "file-1"}}, 1),
        ({"file": {"id": "file-1"}, "create": {"in_flight_until": "2026-05-01T12:00:00+00:00"}}, 1),
        ({"file": {"id": "file-1"}, "remote": {"id": "ftjob-1", "status": None}}, 2),
        ({"file": {"id": "file-1"}, "remote": {"id": "ftjob-1", "status": "queued"}}, 2),
        ({"file": {"id": "file-1"}, "remote": {"id": "ftjob-1", "status": "running"}}, 3),
        ({"file": {"id": "file-1"}, "remote": {"id": "ftjob-1", "status": "succeeded"}}, 4),
        ({"file": {"id": "file-1"}, "remote": {"id": "ftjob-1", "status": "failed"}}, 4),
    ],
)
def test_progress_is_read_from_the_saved_state(state: dict[str, Any], done: int) -> None:
    assert fine_tune.steps_done(state) == done
    assert done <= fine_tune.STEPS
