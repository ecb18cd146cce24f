"""The inspector's pure decisions: its gate over plain facts, where bad arguments are named, what the
audit row keeps of them. No database."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.gates import InspectorFacts, Verdict, inspector_gate
from ticketiq.engine.transcript import scrub
from ticketiq.intake.inspector import args_digest, args_problem

BASE = InspectorFacts(
    principal="alice",
    tenant="acme",
    channel="inspector",
    granted=frozenset({"jira_get_issue", "jira_add_comment"}),
    needs_approval=frozenset({"teams_reply"}),
)
# The order the gates are checked in: the first that refuses is the one reported.
REFUSALS: list[tuple[dict[str, Any], str, str]] = [
    ({"tenant_quarantine": "breach"}, "containment", "tenant acme is quarantined: breach"),
    ({"channel_enabled": False}, "channel", "channel inspector is disabled"),
    ({"principal_may_run": False}, "run_as", "principal alice may no longer act"),
    ({"granted": frozenset({"teams_reply"})}, "run_as", "principal alice may not use tool jira_add_comment"),
    ({"needs_approval": frozenset({"jira_add_comment"})}, "approval", "an ad hoc call does not wait"),
]


def test_a_granted_call_passes_every_gate() -> None:
    decision = inspector_gate(BASE, "jira_add_comment")
    assert (decision.verdict, decision.allowed) == (Verdict.ALLOW, True)


@pytest.mark.parametrize(("change", "gate", "words"), REFUSALS)
def test_each_gate_refuses_with_its_reason(change: dict[str, Any], gate: str, words: str) -> None:
    decision = inspector_gate(replace(BASE, **change), "jira_add_comment")
    assert (decision.verdict, decision.gate) == (Verdict.REFUSE, gate)
    assert words in decision.reason


def test_an_empty_quarantine_reason_still_quarantines() -> None:
    decision = inspector_gate(replace(BASE, tenant_quarantine=""), "jira_get_issue")
    assert decision.gate == "containment" and "no reason given" in decision.reason


def test_a_tool_needing_approval_is_refused_never_held() -> None:
    # Granted, and needing approval: an ad hoc call has no run to suspend, so it is never APPROVAL.
    facts = replace(BASE, granted=frozenset({"teams_reply"}))
    assert inspector_gate(facts, "teams_reply").verdict is Verdict.REFUSE


@given(flags=st.lists(st.booleans(), min_size=len(REFUSALS), max_size=len(REFUSALS)))
def test_the_first_failing_gate_in_order_is_the_one_reported(flags: list[bool]) -> None:
    facts = BASE
    for on, (change, _, _) in zip(flags, REFUSALS, strict=True):
        if on:
            facts = replace(facts, **change)
    decision = inspector_gate(facts, "jira_add_comment")
    expected = next((gate for on, (_, gate, _) in zip(flags, REFUSALS, strict=True) if on), None)
    assert decision.verdict is (Verdict.ALLOW if expected is None else Verdict.REFUSE)  # never APPROVAL
    if expected is not None:
        assert decision.gate == expected


SCHEMA = {
    "type": "object",
    "properties": {
        "issue_key": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "body": {"type": "string", "minLength": 1},
    },
    "required": ["issue_key", "body"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("args", "field", "words"),
    [
        ({"body": "hi"}, "body.args.issue_key", "'issue_key' is required"),
        ({"issue_key": "not a key", "body": "hi"}, "body.args.issue_key", "must match"),
        ({"issue_key": "OPS-1", "body": ""}, "body.args.body", "at least 1 characters"),
        ({"issue_key": "OPS-1", "body": "hi", "extra": 1}, "body.args.extra", "'extra' is not allowed"),
        ({"issue_key": "OPS-1", "body": 5}, "body.args.body", "must be string"),
    ],
)
def test_bad_arguments_name_the_argument_at_fault(args: dict[str, Any], field: str, words: str) -> None:
    found = args_problem(SCHEMA, args)
    assert found is not None
    assert found[0] == field
    assert words in found[1] and found[1].startswith("arguments rejected: ")


def test_arguments_that_fit_have_no_problem_and_a_schema_level_problem_names_args() -> None:
    assert args_problem(SCHEMA, {"issue_key": "OPS-1", "body": "hi"}) is None
    assert args_problem({"type": "object", "minProperties": 1, "maxProperties": 0}, {}) is None  # unknown keywords
    problem = args_problem({"type": "array"}, {})
    assert problem == ("body.args", "arguments rejected: the arguments must be array, not object")


def test_the_audit_masks_secrets_everywhere_and_the_digest_is_canonical() -> None:
    args = {"b": ["token sekrit-1", {"x": "sekrit-1sekrit-2"}], "a": 1, "c": None}
    assert scrub(args, ["sekrit-1", "sekrit-2"]) == {"b": ["token ***", {"x": "******"}], "a": 1, "c": None}
    assert args_digest({"a": 1, "b": "é"}) == args_digest({"b": "é", "a": 1})
    assert args_digest({"a": 1}) != args_digest({"a": 2})
    assert len(args_digest({})) == 64
