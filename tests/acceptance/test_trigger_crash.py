"""Webhook and ticket-event runs with real `ticketiq serve` processes over one Postgres (I13).

A signed delivery (or a signed Jira event) reaches a victim process, which kills itself mid-run
(TICKETIQ_FAULT_POINT=after_checkpoint, the 2nd checkpoint: the issue read, the incident not yet made).
The survivor resumes the run as any run: one incident, one Jira comment, one Teams reply, and the answer
on the run's transcript (the sender hung up long ago). The same delivery sent again, now to the
survivor, is answered with the same run and starts nothing. With TICKETIQ_CRASH_RESUME_ENTRIES false
a lost webhook run is failed with a reason naming the setting.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import httpx
import pytest

from tests.acceptance.test_crash_resume import triage_writes_once
from tests.support.cluster import App, Cluster
from tests.support.http import web

SECRET = "acceptance-trigger-secret-0123456789"
JIRA_SECRET = "acceptance-jira-secret-0123456789"


def hook_body(n: int) -> bytes:
    return json.dumps({"alert": "checkout 502s", "ticket": f"OPS-{n}", "source": "pagerduty"}).encode()


def jira_body(n: int) -> bytes:
    return json.dumps({
        "timestamp": int(time.time() * 1000), "webhookEvent": "jira:issue_created",
        "issue": {"id": str(10000 + n), "key": f"OPS-{n}", "fields": {"summary": "checkout is failing"}},
    }).encode()  # fmt: skip


def deliver(app: App, delivery: str, body: bytes) -> httpx.Response | None:
    """A signed delivery; None when the process died before it answered (the delivery was stored or
    not: the database says)."""
    t = str(int(time.time()))
    mac = hmac.new(SECRET.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
    headers = {"X-TicketIQ-Delivery": delivery, "X-TicketIQ-Signature": f"t={t},v1={mac}"}
    try:
        return web.post(f"{app.base}/v1/hooks/oncall", content=body, headers=headers, timeout=30)
    except httpx.TransportError:
        return None


def send_event(app: App, identifier: str, body: bytes) -> httpx.Response | None:
    mac = hmac.new(JIRA_SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-Hub-Signature": f"sha256={mac}", "X-Atlassian-Webhook-Identifier": identifier}
    try:
        return web.post(f"{app.base}/v1/ticket-events", content=body, headers=headers, timeout=30)
    except httpx.TransportError:
        return None


def declare(cluster: Cluster, app: App) -> None:
    made = web.post(f"{app.base}/v1/triggers", json={"name": "oncall", "agent": "triage", "secret": SECRET},
                      headers=cluster.auth, timeout=30)  # fmt: skip
    assert made.status_code == 201, made.text


def answer_on_transcript(cluster: Cluster, app: App, run: dict[str, Any]) -> None:
    response = web.get(f"{app.base}/v1/runs/{run['id']}/transcript", headers=cluster.auth, timeout=30)
    response.raise_for_status()
    answers = [e["text"] for e in response.json()["entries"] if e["kind"] == "answer"]
    assert answers == [run["answer"]], response.json()


def test_a_webhook_run_killed_mid_run_is_resumed_once_and_a_redelivery_starts_nothing(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2)
    survivor = cluster.app("survivor")
    declare(cluster, survivor)
    body = hook_body(801)
    first = deliver(victim, "pd-801", body)
    cluster.wait_until(lambda: not victim.child.alive(), 60, "the victim dying")
    rows = cluster.rows("SELECT run_id::text AS run_id FROM trigger_deliveries WHERE delivery_id = 'pd-801'")
    assert len(rows) == 1, (rows, cluster.logs())
    run_id = rows[0]["run_id"]
    if first is not None:
        assert (first.status_code, first.json()) == (202, {"run_id": run_id})
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert (run["channel"], run["may_wait"], run["losses"], run["created_by"]) == (
        "webhook",
        False,
        1,
        "trigger:oncall",
    )
    assert "OPS-801" in run["answer"]
    triage_writes_once(cluster, 801)
    answer_on_transcript(cluster, survivor, run)
    assert len(cluster.audit(run_id, "agent.run.crash_resumed")) == 1

    again = deliver(survivor, "pd-801", body)
    assert again is not None and (again.status_code, again.json()) == (202, {"run_id": run_id})
    assert len(cluster.rows("SELECT 1 FROM runs")) == 1
    triage_writes_once(cluster, 801)


def test_a_ticket_event_run_killed_mid_run_is_resumed_once_and_a_redelivery_starts_nothing(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, jira_webhook_secret=JIRA_SECRET)
    survivor = cluster.app("survivor", jira_webhook_secret=JIRA_SECRET)
    body = jira_body(802)
    first = send_event(victim, "jira-ev-802", body)
    cluster.wait_until(lambda: not victim.child.alive(), 60, "the victim dying")
    rows = cluster.rows("SELECT agent, run_id::text AS run_id FROM ticket_events WHERE event_id = 'jira-ev-802'")
    assert [r["agent"] for r in rows] == ["triage"], (rows, cluster.logs())  # the sample's one opted-in agent
    run_id = rows[0]["run_id"]
    if first is not None:
        assert (first.status_code, first.json()["runs"]) == (202, {"triage": run_id})
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert (run["channel"], run["may_wait"], run["losses"]) == ("ticket_event", False, 1)
    assert run["input"] == "Jira issue_created for OPS-802: checkout is failing"
    assert "OPS-802" in run["answer"]
    triage_writes_once(cluster, 802)
    answer_on_transcript(cluster, survivor, run)

    again = send_event(survivor, "jira-ev-802", body)
    assert again is not None and (again.status_code, again.json()["runs"]) == (202, {"triage": run_id})
    assert len(cluster.rows("SELECT 1 FROM runs")) == 1
    triage_writes_once(cluster, 802)


def test_with_crash_resume_entries_false_a_lost_webhook_run_is_failed_naming_the_setting(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False)
    survivor = cluster.app("survivor", crash_resume_entries=False)
    declare(cluster, survivor)
    deliver(victim, "pd-803", hook_body(803))
    cluster.wait_until(lambda: not victim.child.alive(), 60, "the victim dying")
    run_id = cluster.rows("SELECT run_id::text AS run_id FROM trigger_deliveries")[0]["run_id"]
    run = cluster.wait_run(run_id)
    assert run["status"] == "failed", (run, cluster.logs())
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in run["error"] and "webhook" in run["error"]
    assert survivor.child.alive()
    # Nothing was made again: the incident was never created, the issue only read.
    assert [w for w in cluster.writes() if w["effect"] == "applied"] == []


def test_with_crash_resume_entries_false_a_lost_ticket_event_run_is_failed_naming_the_setting(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False,
                         jira_webhook_secret=JIRA_SECRET)  # fmt: skip
    survivor = cluster.app("survivor", crash_resume_entries=False, jira_webhook_secret=JIRA_SECRET)
    send_event(victim, "jira-ev-805", jira_body(805))
    cluster.wait_until(lambda: not victim.child.alive(), 60, "the victim dying")
    run_id = cluster.rows("SELECT run_id::text AS run_id FROM ticket_events")[0]["run_id"]
    run = cluster.wait_run(run_id)
    assert run["status"] == "failed", (run, cluster.logs())
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in run["error"] and "ticket_event" in run["error"]
    assert survivor.child.alive()
    assert [w for w in cluster.writes() if w["effect"] == "applied"] == []


@pytest.mark.parametrize("entry", ["webhook", "ticket_event"])
def test_a_trigger_run_killed_after_its_last_step_ends_with_its_answer_on_the_transcript_and_no_write_again(
    cluster: Cluster, entry: str
) -> None:
    # Webhook and ticket-event runs hand nothing on: the statement that ends the run keeps the answer
    # (I12) and puts it on the transcript. Killed after the last step, before that statement, the
    # survivor asks the model for the answer (model text being generated at a crash is asked again,
    # docs/crash-resume.md, "Not promised"), and no write of the run is made again.
    victim = cluster.app("victim", fault_point="before_answer", jira_webhook_secret=JIRA_SECRET)
    survivor = cluster.app("survivor", jira_webhook_secret=JIRA_SECRET)
    if entry == "webhook":
        declare(cluster, survivor)
        deliver(victim, "pd-804", hook_body(804))
    else:
        send_event(victim, "jira-ev-804", jira_body(804))
    cluster.wait_until(lambda: not victim.child.alive(), 60, "the victim dying")
    run_id = cluster.rows("SELECT id::text AS id FROM runs WHERE channel = %s", entry)[0]["id"]
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded" and run["losses"] == 1, (run, cluster.logs())
    triage_writes_once(cluster, 804)
    answer_on_transcript(cluster, survivor, run)
    kept = cluster.rows("SELECT answer FROM answers WHERE run_id = %s", run_id)
    assert kept == [{"answer": run["answer"]}]
    repeated = cluster.rows(
        "SELECT step, count(*) AS n FROM standin.model_requests GROUP BY conversation, step HAVING count(*) > 1"
    )
    assert [r["step"] for r in repeated] == [3]  # only the answer's step, being generated at the kill
