"""Crash resume with real `ticketiq serve` processes over one Postgres (I5-I9, fast death detection).

A victim process is killed (SIGKILL, by its own fault injection at a named point) while a run is in
flight; the survivor leads, finds the victim's liveness mark free, claims the run once and finishes
it. The stand-ins' records show every write applied once, or settled as unknown and never twice.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import Cluster

TRIAGE = "Triage OPS-{n}: checkout is failing"


def applied(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["effect"] == "applied"]


def settled(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    resumed = cluster.audit(run_id, "agent.run.crash_resumed")
    assert len(resumed) == 1, cluster.audit(run_id)
    calls: list[dict[str, Any]] = resumed[0]["detail"]["calls"]
    return calls


def triage_writes_once(cluster: Cluster, n: int) -> None:
    """One incident, one Jira comment and one Teams reply for the ticket, each applied once."""
    incidents = applied(cluster.writes(vendor="incidentio"))
    assert len([w for w in incidents if f"OPS-{n}" in str(w["body"])]) == 1, incidents
    assert len(applied(cluster.writes(vendor="jira", target=f"OPS-{n}"))) == 1
    assert len(applied(cluster.writes(vendor="teams"))) == 1


@pytest.mark.parametrize(
    ("point", "after", "expect"),
    [
        # Killed with step 1's checkpoint written (a read-only step: its notes still in the checkpoint).
        ("after_checkpoint", 1, {"jira_get_issue": "made"}),
        # Killed with step 2's checkpoint written, the incident not yet created: made on resume.
        ("after_checkpoint", 2, {"incidentio_create_incident": "made"}),
        # The incident create marked in doubt, not sent: resent with the same key, applied once.
        ("after_mark", 1, {"incidentio_create_incident": "resent_same_key"}),
        # The incident created, its outcome not recorded: resent with the same key, deduped.
        ("after_send", 1, {"incidentio_create_incident": "resent_same_key"}),
        # The Jira comment marked, not sent: once it can no longer be in flight, read back, not there,
        # sent once.
        ("after_mark", 2, {"jira_add_comment": "sent_once", "teams_reply": "made"}),
        # The Jira comment sent, not recorded: read back and found, not sent again.
        ("after_send", 2, {"jira_add_comment": "found", "teams_reply": "made"}),
        # The Teams reply sent, not recorded: found again through Graph.
        ("after_send", 3, {"jira_add_comment": "reused", "teams_reply": "found"}),
    ],
)
def test_a_run_killed_at_a_named_point_ends_on_the_survivor_with_every_write_once(
    cluster: Cluster, point: str, after: int, expect: dict[str, str]
) -> None:
    survivor = cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False, fault_point=point, fault_after=after, call_concurrency=1)
    run_id = cluster.post_run(victim, "triage", TRIAGE.format(n=500 + after))
    victim.child.proc.wait(60)  # it SIGKILLs itself at the point
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["losses"] == 1
    triage_writes_once(cluster, 500 + after)
    routes = {c["tool"]: c["happened"] for c in settled(cluster, run_id)}
    for tool, how in expect.items():
        assert routes[tool] == how, routes
    # A write read back was found (it had landed) or, not there, sent once: never left unknown.
    recorded = cluster.rows("SELECT tool, settlement FROM calls WHERE run_id = %s", run_id)
    assert "unknown_not_sent" not in {r["settlement"] for r in recorded}, recorded
    # Nothing the lost process wrote ahead is missing from the transcript: every step once, in order.
    bodies = cluster.rows("SELECT body FROM transcripts WHERE run_id = %s AND kind = 'entries' ORDER BY id", run_id)
    steps = [e["body"]["step"] for b in bodies for e in b["body"]["entries"] if e["kind"] == "model_step"]
    assert steps == [1, 2, 3]
    assert survivor.child.alive()


def test_a_run_killed_before_its_answer_was_handed_on_is_answered_once(cluster: Cluster) -> None:
    cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False, fault_point="before_answer")
    run_id = cluster.post_run(victim, "triage", TRIAGE.format(n=600))
    victim.child.proc.wait(60)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded"
    assert "OPS-600" in run["answer"]
    triage_writes_once(cluster, 600)
    # Every call of the last step was recorded: none is made again.
    assert {c["happened"] for c in settled(cluster, run_id)} == {"reused"}


@pytest.mark.parametrize(
    ("point", "after", "tool", "vendor"),
    [
        ("after_mark", 1, "discord_send_message", "discord"),
        ("after_send", 1, "discord_send_message", "discord"),
        ("after_send", 2, "sqs_send_message", "sqs"),
        ("after_send", 3, "webhook_post", "webhook"),
    ],
)
def test_writes_to_vendors_without_a_reader_are_settled_unknown_never_twice(
    cluster: Cluster, point: str, after: int, tool: str, vendor: str
) -> None:
    cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False, fault_point=point, fault_after=after, call_concurrency=1)
    run_id = cluster.post_run(victim, "writer", "Announce OPS-700")
    victim.child.proc.wait(60)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", cluster.logs()
    routes = {c["tool"]: c["happened"] for c in settled(cluster, run_id)}
    assert routes[tool] == "unknown_not_sent"
    assert len(cluster.writes(vendor=vendor)) == (1 if point == "after_send" else 0)  # never sent twice
    for other in ("discord", "sqs", "webhook"):
        assert len(applied(cluster.writes(vendor=other))) <= 1
    unknown = cluster.audit(run_id, "agent.call.settled_unknown")
    assert [u["detail"]["tool"] for u in unknown] == [tool]
    state = cluster.rows("SELECT state::jsonb AS s FROM checkpoints WHERE run_id = %s", run_id)[0]["s"]
    told = [m["content"] for m in state["messages"] if m["role"] == "tool"]
    assert any("outcome unknown" in t and "not sent again" in t for t in told)
