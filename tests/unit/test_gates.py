from __future__ import annotations

from dataclasses import replace

import pytest

from ticketiq.engine.gates import GateFacts, Verdict, call_gate, delegation_gate, run_gate

BASE = GateFacts(
    agent="triage",
    tenant="acme",
    owner="ops-bot",
    channel="api",
    may_wait=True,
    granted=frozenset({"jira_get_issue", "jira_add_comment"}),
    needs_approval=frozenset({"jira_add_comment"}),
)
OFFERED = frozenset({"jira_get_issue", "jira_add_comment", "teams_reply"})


def test_an_allowed_call_passes_every_gate() -> None:
    assert call_gate(BASE, "jira_get_issue", OFFERED).verdict is Verdict.ALLOW


@pytest.mark.parametrize(
    ("change", "gate", "words"),
    [
        ({"agent_quarantine": "leaked data"}, "containment", "agent triage is quarantined: leaked data"),
        ({"tenant_quarantine": ""}, "containment", "tenant acme is quarantined"),
        ({"stopped_by": "alice"}, "stop", "stopped by alice"),
        ({"channel_enabled": False}, "channel", "channel api is disabled"),
        ({"owner_may_run": False}, "run_as", "owner ops-bot may no longer run"),
    ],
)
def test_each_run_gate_refuses_with_its_reason(change: dict[str, object], gate: str, words: str) -> None:
    facts = replace(BASE, **change)  # type: ignore[arg-type]
    for decision in (run_gate(facts), call_gate(facts, "jira_get_issue", OFFERED)):
        assert decision.verdict is Verdict.REFUSE
        assert decision.gate == gate
        assert words in decision.reason


def test_run_as_authority_refuses_an_ungranted_tool() -> None:
    decision = call_gate(BASE, "teams_reply", OFFERED)
    assert (decision.verdict, decision.gate) == (Verdict.REFUSE, "run_as")
    assert "may not use tool teams_reply" in decision.reason


def test_a_tool_not_offered_to_the_agent_is_refused() -> None:
    decision = call_gate(replace(BASE, granted=frozenset({"sqs_send_message"})), "sqs_send_message", OFFERED)
    assert (decision.verdict, decision.gate) == (Verdict.REFUSE, "tools")


def test_approval_holds_a_call_unless_approved_or_the_run_may_not_wait() -> None:
    assert call_gate(BASE, "jira_add_comment", OFFERED).verdict is Verdict.APPROVAL
    assert call_gate(BASE, "jira_add_comment", OFFERED, approved=True).verdict is Verdict.ALLOW
    no_wait = call_gate(replace(BASE, may_wait=False), "jira_add_comment", OFFERED)
    assert (no_wait.verdict, no_wait.gate) == (Verdict.REFUSE, "approval")


def test_containment_outranks_an_approval() -> None:
    facts = replace(BASE, tenant_quarantine="incident")
    assert call_gate(facts, "jira_add_comment", OFFERED, approved=True).gate == "containment"


def test_a_run_may_ask_for_input_only_when_it_may_wait_and_every_run_gate_passes() -> None:
    from ticketiq.engine.gates import input_gate

    assert input_gate(BASE).verdict is (Verdict.ALLOW if BASE.may_wait else Verdict.REFUSE)
    assert input_gate(replace(BASE, may_wait=True)).verdict is Verdict.ALLOW
    refused = input_gate(replace(BASE, may_wait=False))
    assert (refused.verdict, refused.gate) == (Verdict.REFUSE, "input")
    assert "may not wait for input" in refused.reason
    stopped = input_gate(replace(BASE, may_wait=True, stopped_by="ops"))
    assert (stopped.verdict, stopped.gate) == (Verdict.REFUSE, "stop")


STARTED = replace(BASE, starter="cal", starter_role="caller", starter_agents=frozenset({"delegator"}))


@pytest.mark.parametrize(
    ("facts", "agent", "defined", "words"),
    [
        (STARTED, "writer", True, "token cal may not start agent writer; it may start: delegator"),
        (replace(STARTED, starter_revoked=True), "delegator", True, "token cal that started the run is revoked"),
        (replace(STARTED, starter_role=None), "delegator", True, "token cal that started the run is gone"),
        (STARTED, "ghost", False, "no agent named ghost"),
    ],
)
def test_a_delegation_starts_only_what_the_runs_starter_may_start_itself(
    facts: GateFacts, agent: str, defined: bool, words: str
) -> None:
    refused = delegation_gate(facts, agent, defined)
    assert (refused.verdict, refused.gate) == (Verdict.REFUSE, "delegation")
    assert words in refused.reason


def test_a_delegation_within_the_starters_agents_or_of_a_run_no_token_started_passes() -> None:
    assert delegation_gate(STARTED, "delegator", True).allowed
    assert delegation_gate(replace(STARTED, starter_agents=None), "writer", True).allowed  # every agent
    assert delegation_gate(BASE, "writer", True).allowed  # a cron fire's or a Teams turn's run: no token
