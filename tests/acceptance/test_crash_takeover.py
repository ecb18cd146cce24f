"""Takeover rules with real processes: stalls, the loss limit, seals and gates on resume, delegation,
leader failover, metrics."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.acceptance.test_crash_resume import applied, settled, triage_writes_once
from tests.support.cluster import Cluster
from tests.support.http import web
from ticketiq.runtime.stall import EXIT_STALLED


@pytest.fixture
def slow_cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster("--model-latency-ms", "1500")


def counts(cluster: Cluster) -> dict[str, object]:
    """Everything a process could have written: the database's rows and the stand-ins' records."""
    row = cluster.rows(
        "SELECT (SELECT count(*) FROM transcripts) AS transcripts, (SELECT count(*) FROM calls) AS calls, "
        "(SELECT count(*) FROM audit_log) AS audit, (SELECT max(written_at) FROM checkpoints) AS checkpoint, "
        "(SELECT max(updated_at) FROM calls) AS call_update, (SELECT count(*) FROM approvals) AS approvals"
    )[0]
    return {**row, "vendor_writes": len(cluster.writes())}


@pytest.mark.long
def test_a_stalled_owner_is_taken_over_and_after_waking_sends_and_writes_nothing(
    slow_cluster: Cluster,
) -> None:
    cluster = slow_cluster
    cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-801: stalls")
    cluster.wait_until(lambda: cluster.run(run_id)["step"] >= 1, 30, "the first step")
    os.kill(victim.pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    run = cluster.wait_run(run_id, timeout_s=60)
    took = time.monotonic() - stopped_at
    assert run["status"] == "succeeded", cluster.logs()
    assert run["losses"] == 1
    assert took > 6.0  # the 8 s lease was waited out: a stalled process keeps its liveness mark
    before = counts(cluster)
    os.kill(victim.pid, signal.SIGCONT)
    time.sleep(4.0)  # past its renewal interval and the model's answer it was waiting for
    assert counts(cluster) == before  # no vendor call and no database write after waking
    # It stopped itself at its first statement after waking (ticketiq/runtime/stall.py), to be started afresh.
    assert victim.child.proc.wait(10) == EXIT_STALLED
    assert "did not run for" in victim.child.log_tail(20000)
    triage_writes_once(cluster, 801)


def test_a_run_lost_three_times_is_failed_with_the_reason(cluster: Cluster) -> None:
    # Every process dies at its first checkpoint: each takeover is lost again, until the limit.
    first = cluster.app("p1", lead=False, fault_point="after_checkpoint")
    for name in ("p2", "p3", "p4"):
        cluster.app(name, lead=True, fault_point="after_checkpoint")
    run_id = cluster.post_run(first, "triage", "Triage OPS-802: cursed")
    run = cluster.wait_run(run_id, timeout_s=90)
    assert run["status"] == "failed"
    assert run["losses"] == 3
    assert "lost 3 times, more than the limit of 2" in run["error"]
    entries = cluster.rows("SELECT body::text AS b FROM transcripts WHERE run_id = %s", run_id)
    assert any("more than the limit" in e["b"] for e in entries)  # the transcript is told
    assert len(cluster.audit(run_id, "agent.run.crash_resumed")) == 2


def test_a_tampered_checkpoint_is_refused_on_resume_and_audited(cluster: Cluster) -> None:
    victim = cluster.app("victim", lead=False, fault_point="after_checkpoint", fault_after=2)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-803: tampered")
    victim.child.proc.wait(60)
    cluster.rows("UPDATE checkpoints SET state = replace(state, 'OPS-803', 'OPS-999') WHERE run_id = %s", run_id)
    cluster.app("survivor", lead=True)
    run = cluster.wait_run(run_id)
    assert run["status"] == "failed"
    assert "failed verification" in run["error"]
    assert [a["action"] for a in cluster.audit(run_id)][-1] == "agent.run.checkpoint_rejected"
    assert applied(cluster.writes(vendor="incidentio")) == []


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ("UPDATE runs SET stop_requested_at = now(), stopped_by = 'oncall' WHERE id = %s", "stopped by oncall"),
        ("UPDATE principals SET may_run = false WHERE name = 'ops-bot' AND %s::text IS NOT NULL", "may no longer run"),
        ("INSERT INTO quarantines (kind, name, reason) SELECT 'tenant', 'acme', 'breach' WHERE %s::text IS NOT NULL",
         "tenant acme is quarantined"),
        ("INSERT INTO channels (name, enabled) SELECT 'api', false WHERE %s::text IS NOT NULL",
         "channel api is disabled"),
    ],
)  # fmt: skip
def test_a_gate_that_closed_while_the_run_was_lost_applies_on_resume(
    cluster: Cluster, change: str, reason: str
) -> None:
    victim = cluster.app("victim", lead=False, fault_point="after_checkpoint", fault_after=2)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-804: stop me")
    victim.child.proc.wait(60)
    cluster.rows(change, run_id)
    cluster.app("survivor", lead=True)
    run = cluster.wait_run(run_id)
    # A Stop ends the run `stopped` (issue 16); every other closed gate fails it.
    assert run["status"] == ("stopped" if reason.startswith("stopped by") else "failed")
    assert reason in run["error"]
    assert cluster.writes(vendor="incidentio") == []


def test_a_tool_revoked_while_the_run_was_lost_is_refused_on_resume(cluster: Cluster) -> None:
    victim = cluster.app("victim", lead=False, fault_point="after_checkpoint", fault_after=2)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-805: revoked")
    victim.child.proc.wait(60)
    cluster.rows("UPDATE grants SET revoked = true WHERE principal = 'ops-bot' AND tool = 'incidentio_create_incident'")
    cluster.app("survivor", lead=True)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded"  # the model was told and went on
    assert cluster.writes(vendor="incidentio") == []
    calls = cluster.rows("SELECT tool, gate, outcome::text AS o FROM calls WHERE run_id = %s AND step = 2", run_id)
    assert calls[0]["gate"] == "refuse"
    assert "ops-bot may not use tool incidentio_create_incident" in calls[0]["o"]


@pytest.mark.parametrize(("point", "after"), [("after_mark", 1), ("after_send", 1), ("after_checkpoint", 2)])
def test_a_lost_delegation_is_asked_again_by_its_key_and_finds_one_child(
    cluster: Cluster, point: str, after: int
) -> None:
    # after_checkpoint 2 is the child's first checkpoint: parent and child are lost together.
    cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False, fault_point=point, fault_after=after)
    run_id = cluster.post_run(victim, "delegator", "Look into OPS-806")
    victim.child.proc.wait(60)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", cluster.logs()
    children = cluster.rows("SELECT id, status, answer FROM runs WHERE parent_run_id = %s", run_id)
    assert len(children) == 1
    assert children[0]["status"] == "succeeded"
    assert children[0]["answer"] in run["answer"]
    routes = {c["tool"]: c["happened"] for c in settled(cluster, run_id)}
    assert routes["delegate_to_agent"] in ("resent_same_key", "made")


def test_when_the_leader_dies_another_process_leads_and_sweeps(cluster: Cluster) -> None:
    first = cluster.app("a", lead=True)
    cluster.wait_until(lambda: bool(cluster.rows("SELECT 1 FROM leases WHERE name = 'leader'")), 30, "a leader")
    second = cluster.app("b", lead=True)
    leader = cluster.rows("SELECT holder FROM leases WHERE name = 'leader'")[0]["holder"]
    dying, other = (first, second) if f":{first.pid}:" in leader else (second, first)
    dying.child.kill()
    cluster.wait_until(
        lambda: f":{other.pid}:" in cluster.rows("SELECT holder FROM leases WHERE name = 'leader'")[0]["holder"],
        10, "the other process leading",
    )  # fmt: skip
    run_id = cluster.post_run(other, "triage", "Triage OPS-807: after failover")
    assert cluster.wait_run(run_id)["status"] == "succeeded"


def test_metrics_count_resumes_claims_settlements_and_recovery(cluster: Cluster) -> None:
    survivor = cluster.app("survivor", lead=True)
    victim = cluster.app("victim", lead=False, fault_point="after_send", fault_after=1)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-808: metrics")
    victim.child.proc.wait(60)
    assert cluster.wait_run(run_id)["status"] == "succeeded"
    response = web.get(f"{survivor.base}/metrics", timeout=10)
    assert response.headers["content-type"].startswith("text/plain")
    seen = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text)
        for s in family.samples
    }
    assert seen[("ticketiq_runs_resumed_total", ())] == 1
    assert seen[("ticketiq_claims_total", (("why", "dead"),))] == 1
    assert seen[("ticketiq_settlements_total", (("kind", "resent_same_key"),))] == 1
    assert seen[("ticketiq_recovery_seconds_count", ())] == 1
    assert seen[("ticketiq_runs_lost_total", ())] == 0
    assert ("ticketiq_lease_lapses_total", ()) in seen
