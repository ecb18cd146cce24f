"""Co-pilot turns and runs that wait, with real `ticketiq serve` processes over one Postgres (I12, I13).

A victim process kills itself at a named point (TICKETIQ_FAULT_POINT) while it works a co-pilot turn;
the survivor finishes the turn and hands its answer on once, and the caller, who has hung up, finds it
on the transcript. Killed between the last step and the hand-on, the survivor hands on the kept answer:
the stand-in model's records show no step asked twice, the vendors' records no write repeated. With
TICKETIQ_CRASH_RESUME_ENTRIES false a lost turn is failed with a reason naming the setting. A run
waiting for input or for a decision goes on at the process that gets the input or the decision.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.cluster import App, Cluster
from tests.support.http import web


def ask_copilot(cluster: Cluster, app: App, ticket: str) -> None:
    """A co-pilot turn sent to a process that dies working it: the caller's connection drops."""
    body = {"agent": "triage", "ticket": ticket, "question": "checkout is failing; triage it"}
    with pytest.raises(httpx.TransportError):
        web.post(f"{app.base}/v1/copilot/turns", json=body, headers=cluster.auth, timeout=60)


def copilot_run(cluster: Cluster) -> str:
    rows = cluster.rows("SELECT id::text AS id FROM runs WHERE channel = 'copilot'")
    assert len(rows) == 1, rows
    return str(rows[0]["id"])


def writes_once(cluster: Cluster, ticket: str) -> None:
    applied = [w for w in cluster.writes() if w["effect"] == "applied"]
    assert len([w for w in applied if w["vendor"] == "incidentio" and ticket in str(w["body"])]) == 1, applied
    assert len([w for w in applied if w["vendor"] == "jira" and w["target"] == ticket]) == 1, applied
    assert len([w for w in applied if w["vendor"] == "teams"]) == 1, applied


def no_step_asked_twice(cluster: Cluster) -> int:
    repeated = cluster.rows(
        "SELECT conversation, step, count(*) AS n FROM standin.model_requests GROUP BY 1, 2 HAVING count(*) > 1"
    )
    assert repeated == [], repeated
    return len(cluster.rows("SELECT 1 FROM standin.model_requests"))


def kinds(cluster: Cluster, run_id: str) -> list[dict[str, Any]]:
    response = web.get(f"{cluster.apps[-1].base}/v1/runs/{run_id}/transcript", headers=cluster.auth, timeout=30)
    response.raise_for_status()
    entries: list[dict[str, Any]] = response.json()["entries"]
    return entries


def test_a_co_pilot_turn_killed_mid_run_is_resumed_and_its_answer_lands_on_the_transcript(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2)
    cluster.app("survivor")
    ask_copilot(cluster, victim, "OPS-601")
    run_id = copilot_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert "OPS-601" in run["answer"] and run["losses"] == 1
    writes_once(cluster, "OPS-601")
    entries = kinds(cluster, run_id)
    assert [e["text"] for e in entries if e["kind"] == "answer"] == [run["answer"]]
    assert [e.get("resumed") for e in entries if e["kind"] == "handed_on"] == [
        False
    ]  # handed on by the survivor's own steps
    assert len(cluster.audit(run_id, "agent.run.crash_resumed")) == 1


def test_a_co_pilot_turn_killed_between_its_answer_and_the_hand_on_hands_on_the_kept_answer(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="before_hand_on")
    cluster.app("survivor")
    ask_copilot(cluster, victim, "OPS-602")
    run_id = copilot_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    kept = cluster.rows("SELECT answer, handed_on_at FROM answers WHERE run_id = %s", run_id)
    assert kept[0]["answer"] == run["answer"] and kept[0]["handed_on_at"] is not None
    assert no_step_asked_twice(cluster) == 4  # triage's four steps, each asked once: never again
    writes_once(cluster, "OPS-602")
    entries = kinds(cluster, run_id)
    assert [e.get("resumed") for e in entries if e["kind"] == "handed_on"] == [True]
    assert [e["text"] for e in entries if e["kind"] == "answer"] == [run["answer"]]
    assert len(cluster.audit(run_id, "agent.run.answered")) == 1
    assert len(cluster.audit(run_id, "agent.run.succeeded")) == 1


def test_with_crash_resume_entries_false_a_lost_turn_is_failed_naming_the_setting_and_a_run_that_may_wait_goes_on(
    cluster: Cluster,
) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False)
    survivor = cluster.app("survivor", crash_resume_entries=False)
    ask_copilot(cluster, victim, "OPS-603")
    run_id = copilot_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "failed", (run, cluster.logs())
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in run["error"]
    # A run that may wait is written ahead and resumed whatever the setting says.
    second = cluster.app("victim-2", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False)
    cluster.post_run(second, "triage", "Triage OPS-604")  # answered at once; the process dies working it
    cluster.wait_until(lambda: not second.child.alive(), 60, "the second victim dying")
    waiting_run = cluster.rows("SELECT id::text AS id FROM runs WHERE channel = 'api'")[0]["id"]
    resumed = cluster.wait_run(waiting_run)
    assert resumed["status"] == "succeeded" and resumed["may_wait"] and resumed["losses"] == 1
    assert survivor.child.alive()


def test_a_waiting_run_goes_on_at_the_process_that_gets_its_input_or_its_decision(cluster: Cluster) -> None:
    first, second = cluster.app("first"), cluster.app("second")
    holder = {app.base: web.get(f"{app.base}/readyz", timeout=10).json()["process"] for app in (first, second)}
    # An input: asked on the first process, given on the second.
    run_id = cluster.post_run(first, "asker", "Note OPS-605")
    cluster.wait_until(lambda: cluster.run(run_id)["status"] == "waiting", 60, "the run waiting for input")
    assert cluster.rows("SELECT 1 FROM leases WHERE name = %s", f"checkpoint:{run_id}") == []
    shown = web.get(f"{second.base}/v1/runs/{run_id}", headers=cluster.auth, timeout=30).json()
    question = shown["waiting_for"]["question_id"]  # the input names the question it answers (I18)
    given = web.post(f"{second.base}/v1/runs/{run_id}/input", json={"text": "production", "question_id": question},
                       headers=cluster.auth, timeout=30)  # fmt: skip
    assert given.status_code == 202, given.text
    run = cluster.wait_run(run_id)
    assert run["answer"] == "Noted OPS-605 for production." and (run["attempt"], run["losses"]) == (2, 0)
    assert cluster.audit(run_id, "agent.run.succeeded")[0]["detail"]["attempt"] == 2
    ended = cluster.rows("SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", run_id)
    assert ended == [{"actor": holder[second.base]}]
    # A decision: the Jira comment held for approval on the first process, approved on the second.
    policy = web.put(f"{first.base}/v1/gates/policies/jira_add_comment", json={"needs_approval": True},
                       headers=cluster.auth, timeout=30)  # fmt: skip
    policy.raise_for_status()
    held = cluster.post_run(first, "triage", "Triage OPS-606")
    cluster.wait_until(lambda: cluster.run(held)["status"] == "waiting", 60, "the run waiting for a decision")
    approval = cluster.rows("SELECT id::text AS id FROM approvals WHERE run_id = %s", held)[0]["id"]
    decided = web.post(f"{second.base}/v1/approvals/{approval}", json={"decision": "approve"},
                         headers=cluster.auth, timeout=30)  # fmt: skip
    assert decided.status_code == 200, decided.text
    run = cluster.wait_run(held)
    assert run["status"] == "succeeded" and run["losses"] == 0
    ended = cluster.rows("SELECT actor FROM audit_log WHERE run_id = %s AND action = 'agent.run.succeeded'", held)
    assert ended == [{"actor": holder[second.base]}]
    assert len([w for w in cluster.writes(vendor="jira", target="OPS-606") if w["effect"] == "applied"]) == 1
