"""Jira ticket events: what an event is, which agents it starts, what each run is asked. Pure."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.agents import catalog
from ticketiq.agents.catalog import Agent
from ticketiq.errors import ConfigError, RequestError
from ticketiq.intake.idempotency import key_problem
from ticketiq.intake.ticket_events import (
    Malformed,
    TicketEvent,
    body_digest,
    identifier_problem,
    opted_in,
    parse_event,
    run_input,
    run_key,
)


def agent(name: str, *events: str) -> Agent:
    return Agent(name, "", "You help.", (), False, "o", on_ticket_events=events)


AGENTS = {
    "triage": agent("triage", "jira:issue_created"),
    "watcher": agent("watcher", "jira:issue_created", "jira:issue_updated"),
    "reader": agent("reader"),
}


def event_body(**overrides: Any) -> bytes:
    data: dict[str, Any] = {
        "timestamp": 1700000000000,
        "webhookEvent": "jira:issue_created",
        "issue": {"id": "10001", "key": "OPS-12", "fields": {"summary": "Checkout fails"}},
        "changelog": {"id": "1", "items": []},
    }
    data.update(overrides)
    return json.dumps(data).encode()


def test_an_issue_event_is_read_from_the_body() -> None:
    assert parse_event("ev-1", event_body()) == TicketEvent("ev-1", "jira:issue_created", "OPS-12", "Checkout fails")
    no_summary = parse_event("ev-1", event_body(issue={"key": "OPS-13"}))
    assert no_summary.summary == ""


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"not json", 400, "body"),
        (b"", 400, "body"),
        (b"[1, 2]", 422, "body"),
        (event_body(webhookEvent=None), 422, "body.webhookEvent"),
        (event_body(webhookEvent=""), 422, "body.webhookEvent"),
        (event_body(webhookEvent=7), 422, "body.webhookEvent"),
        (event_body(issue=None), 422, "body.issue"),
        (event_body(issue="OPS-1"), 422, "body.issue"),
        (event_body(issue={"fields": {}}), 422, "body.issue.key"),
        (event_body(issue={"key": 12}), 422, "body.issue.key"),
        (event_body(issue={"key": "not a key"}), 422, "body.issue.key"),
        (event_body(issue={"key": "OPS-"}), 422, "body.issue.key"),
    ],
)
def test_a_malformed_event_is_refused_naming_what_is_wrong(body: bytes, status: int, field: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_event("ev-1", body)
    assert (refused.value.status, refused.value.field) == (status, field)
    assert isinstance(refused.value, Malformed) is (status == 400)


def test_the_agents_that_opted_in_for_the_event_are_started_and_no_other() -> None:
    assert opted_in("jira:issue_created", AGENTS) == ["triage", "watcher"]
    assert opted_in("jira:issue_updated", AGENTS) == ["watcher"]
    assert opted_in("jira:issue_deleted", AGENTS) == []
    assert opted_in("issue_created", AGENTS) == []  # the event's name as Jira sends it, exactly


def test_each_run_is_asked_about_the_issue_by_key() -> None:
    event = TicketEvent("ev-1", "jira:issue_created", "OPS-12", "Checkout  fails\nsince the deploy")
    assert run_input(event) == "Jira issue_created for OPS-12: Checkout fails since the deploy"
    assert (
        run_input(TicketEvent("e", "jira:issue_updated", "OPS-1", "")) == "Jira issue_updated for OPS-1: (no summary)"
    )
    long = run_input(TicketEvent("e", "jira:issue_created", "OPS-1", "x" * 5000))
    assert len(long) < 600 and long.endswith("…")


@given(identifier=st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255),
       agent_name=st.text(min_size=1, max_size=50))  # fmt: skip
def test_one_run_key_per_event_and_agent_never_an_api_key(identifier: str, agent_name: str) -> None:
    assert identifier_problem(identifier) is None
    key = run_key(identifier, agent_name)
    assert key_problem(key) is not None  # an API Idempotency-Key is printable ASCII: it cannot make this one
    assert key.split("\t", 2)[1:] == [identifier, agent_name]  # unambiguous: the identifier holds no tab


@pytest.mark.parametrize("identifier", [None, "", "x" * 256, "tab\tin", "é"])
def test_an_event_identifier_is_one_to_255_printable_ascii_characters(identifier: str | None) -> None:
    assert identifier_problem(identifier) is not None


def test_a_body_replayed_byte_for_byte_has_the_same_digest_and_any_other_body_another() -> None:
    assert body_digest(event_body()) == body_digest(event_body())
    assert body_digest(event_body()) != body_digest(event_body(timestamp=1700000000001))


def test_agents_opt_in_through_the_agents_file(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text("agents:\n  a:\n    system_prompt: p\n    owner: o\n    on_ticket_events: [jira:issue_created]\n")
    assert catalog.load(path).agents["a"].on_ticket_events == ("jira:issue_created",)
    path.write_text("agents:\n  a:\n    system_prompt: p\n    owner: o\n")
    assert catalog.load(path).agents["a"].on_ticket_events == ()
    for bad in ("jira:issue_created", "[1]", "['']", "{a: b}"):
        path.write_text(f"agents:\n  a:\n    system_prompt: p\n    owner: o\n    on_ticket_events: {bad}\n")
        with pytest.raises(ConfigError, match="on_ticket_events"):
            catalog.load(path)


def test_the_sample_triage_agent_takes_new_jira_issues() -> None:
    sample = catalog.load(Path(catalog.__file__).parent / "sample.yaml")
    assert opted_in("jira:issue_created", sample.agents) == ["triage"]
