"""The gates every call passes, as one pure decision over facts read from Postgres.

Order matters only for which reason is reported: containment, Stop, channel, run-as authority, a
delegation's starter, then approval. A refused call's reason goes back to the model as the tool's result.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ticketiq.auth.tokens import Principal, Role, start_refusal
from ticketiq.storage.inspector_store import InspectorFacts
from ticketiq.storage.rows import GateFacts

__all__ = ["GateDecision", "GateFacts", "InspectorFacts", "Verdict", "call_gate", "delegation_gate", "ending",
           "input_gate", "inspector_gate", "run_gate"]  # fmt: skip


class Verdict(StrEnum):
    # str(verdict) is its value, as for ToolClass (tools/base.py).
    ALLOW = "allow"
    REFUSE = "refuse"
    APPROVAL = "approval"  # held for a person's decision


@dataclass(frozen=True)
class GateDecision:
    verdict: Verdict
    gate: str
    reason: str = ""

    @property
    def allowed(self) -> bool:
        return self.verdict is Verdict.ALLOW


# A decision is frozen, so the allowing ones asked at every step (the run's, a call's) are made once.
_RUN_ALLOWED = GateDecision(Verdict.ALLOW, "run")
_ALL_ALLOWED = GateDecision(Verdict.ALLOW, "all")


def run_gate(facts: GateFacts) -> GateDecision:
    """Gates that hold for the whole run, whatever the call: checked at every step and on resume."""
    if facts.agent_quarantine is not None:
        return GateDecision(
            Verdict.REFUSE,
            "containment",
            f"agent {facts.agent} is quarantined: {facts.agent_quarantine or 'no reason given'}",
        )
    if facts.tenant_quarantine is not None:
        return GateDecision(
            Verdict.REFUSE,
            "containment",
            f"tenant {facts.tenant} is quarantined: {facts.tenant_quarantine or 'no reason given'}",
        )
    if facts.stopped_by is not None:
        return GateDecision(Verdict.REFUSE, "stop", f"the run was stopped by {facts.stopped_by}")
    if not facts.channel_enabled:
        return GateDecision(Verdict.REFUSE, "channel", f"channel {facts.channel} is disabled")
    if not facts.owner_may_run:
        return GateDecision(Verdict.REFUSE, "run_as", f"owner {facts.owner} may no longer run agents")
    return _RUN_ALLOWED


def ending(refused: GateDecision) -> str:
    """How a run a run gate refused ends: `stopped` by a Stop, a status of its own; `failed` otherwise."""
    return "stopped" if refused.gate == "stop" else "failed"


def call_gate(facts: GateFacts, tool: str, offered: frozenset[str], approved: bool = False) -> GateDecision:
    """May this call be made now? `offered` is what the agent may call; `approved` when a person
    already approved this very call."""
    run = run_gate(facts)
    if not run.allowed:
        return run
    if tool not in offered:
        return GateDecision(Verdict.REFUSE, "tools", f"tool {tool} is not offered to agent {facts.agent}")
    if tool not in facts.granted:
        return GateDecision(Verdict.REFUSE, "run_as", f"owner {facts.owner} may not use tool {tool}")
    if tool in facts.needs_approval and not approved:
        if not facts.may_wait:
            return GateDecision(
                Verdict.REFUSE, "approval", f"tool {tool} needs approval and this run may not wait for it"
            )
        return GateDecision(Verdict.APPROVAL, "approval", f"tool {tool} needs a person's approval")
    return _ALL_ALLOWED


def delegation_gate(facts: GateFacts, agent: str, defined: bool) -> GateDecision:
    """May the run start a child run of `agent` (a delegation)? Only what the run's starter could start
    itself, as its token stands now: a caller limited to some agents cannot reach others through a model
    that names them (the child's own run gates then hold for it as for any run). A run no token started (an
    entry point's: a cron fire, a Teams turn, a signed hook) has no token to narrow it."""
    if not defined:
        return GateDecision(Verdict.REFUSE, "delegation", f"no agent named {agent}")
    if facts.starter is None:
        return GateDecision(Verdict.ALLOW, "delegation")
    if facts.starter_role is None:
        return GateDecision(Verdict.REFUSE, "delegation", f"token {facts.starter} that started the run is gone")
    if facts.starter_revoked:
        return GateDecision(Verdict.REFUSE, "delegation", f"token {facts.starter} that started the run is revoked")
    starter = Principal(facts.starter, Role(facts.starter_role), facts.starter_agents)
    refused = start_refusal(starter, agent)
    if refused is not None:
        return GateDecision(
            Verdict.REFUSE, "delegation", f"a delegation starts only what its run's starter may: {refused}"
        )
    return GateDecision(Verdict.ALLOW, "delegation")


def input_gate(facts: GateFacts) -> GateDecision:
    """May the run ask a person for input (the built-in `request_input`)? Only a run that may wait: it
    suspends until the input comes. Any other run is told why, as the call's result."""
    run = run_gate(facts)
    if not run.allowed:
        return run
    if not facts.may_wait:
        return GateDecision(
            Verdict.REFUSE, "input", "this run may not wait for input: its agent is not marked may_wait"
        )
    return GateDecision(Verdict.ALLOW, "input")


def inspector_gate(facts: InspectorFacts, tool: str) -> GateDecision:
    """May a person's ad hoc call from the inspector be made now? The same gates in the same order, with
    the operator as the run-as principal. No agent and no run: no agent quarantine, no Stop, no offer.
    An ad hoc call never waits, so a tool that needs approval is refused, not held."""
    if facts.tenant_quarantine is not None:
        return GateDecision(
            Verdict.REFUSE,
            "containment",
            f"tenant {facts.tenant} is quarantined: {facts.tenant_quarantine or 'no reason given'}",
        )
    if not facts.channel_enabled:
        return GateDecision(Verdict.REFUSE, "channel", f"channel {facts.channel} is disabled")
    if not facts.principal_may_run:
        return GateDecision(Verdict.REFUSE, "run_as", f"principal {facts.principal} may no longer act")
    if tool not in facts.granted:
        return GateDecision(Verdict.REFUSE, "run_as", f"principal {facts.principal} may not use tool {tool}")
    if tool in facts.needs_approval:
        return GateDecision(
            Verdict.REFUSE,
            "approval",
            f"tool {tool} needs a person's approval and an ad hoc call does not wait for one: "
            "call it from a run that may wait, or have an admin change its policy",
        )
    return _ALL_ALLOWED
