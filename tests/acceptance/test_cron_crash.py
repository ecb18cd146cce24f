"""Cron fires with real `ticketiq serve` processes over one Postgres (issue 8; I12, I13).

The survivor starts first and leads, so it is the process that fires the schedule; the spread hands
the fire's run to the other live process, the victim (among equally loaded processes another goes before
the claimer, migration 012). The victim kills itself at a named point (TICKETIQ_FAULT_POINT); the
survivor claims the run once and finishes it from its checkpoint: the fire handed back and run again.
Its outcome is recorded once, every write of the triage agent is applied once, and, killed between the
last step and the hand-on, the model is asked no step twice. With
TICKETIQ_CRASH_RESUME_ENTRIES false a lost fire ends failed with the reason naming the setting.

No test waits for a minute to turn: the schedule is daily at the database clock's current minute, made
through the API, and its next fire time is then moved back to that minute (the only row written by
hand); the leader, checking every 0.2 s, fires it at once.
"""

from __future__ import annotations

from typing import Any

from tests.acceptance.test_crash_resume import triage_writes_once
from tests.acceptance.test_entry_crash import no_step_asked_twice
from tests.support.cluster import App, Cluster
from tests.support.http import web
from tests.support.trial_entries import schedule_due_now

CHECK_S = 0.2


def holder(app: App) -> str:
    return str(web.get(f"{app.base}/readyz", timeout=10).json()["process"])


def leads(cluster: Cluster, app: App) -> str:
    """Wait until the app leads (so it is the one that fires); return its process identity."""
    me = holder(app)
    cluster.wait_until(
        lambda: cluster.rows("SELECT 1 FROM leases WHERE name = 'leader' AND holder = %s", me) != [],
        30, f"{app.child.name} leading",
    )  # fmt: skip
    return me


def schedule_now(cluster: Cluster, app: App, n: int) -> str:
    """A schedule of the triage agent for OPS-n, due now (the kill trials make theirs the same way)."""
    return schedule_due_now(cluster, app.base, n)


def fired(cluster: Cluster, schedule_id: str) -> dict[str, Any]:
    """The schedule's one fire, once its run is made."""
    query = "SELECT *, run_id::text AS run FROM schedule_fires WHERE schedule_id = %s"
    cluster.wait_until(lambda: any(r["run"] for r in cluster.rows(query, schedule_id)), 30, "the schedule firing")
    rows = cluster.rows(query, schedule_id)
    assert len(rows) == 1, rows
    return rows[0]


def fires(cluster: Cluster, app: App, schedule_id: str) -> list[dict[str, Any]]:
    listed = web.get(f"{app.base}/v1/schedules/{schedule_id}/fires", headers=cluster.auth, timeout=30)
    assert listed.status_code == 200, listed.text
    found: list[dict[str, Any]] = listed.json()["fires"]
    return found


def handed_on(cluster: Cluster, run_id: str) -> list[Any]:
    return [a["detail"].get("fire_outcome") for a in cluster.audit(run_id, "agent.run.succeeded")]


def test_a_schedule_fires_the_triage_agent_once_and_records_its_outcome(cluster: Cluster) -> None:
    app = cluster.app("only", cron_check_s=CHECK_S)
    schedule_id = schedule_now(cluster, app, 800)
    fire = fired(cluster, schedule_id)
    run = cluster.wait_run(fire["run"])
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert (run["channel"], run["may_wait"], run["losses"]) == ("cron", False, 0)
    triage_writes_once(cluster, 800)
    listed = fires(cluster, app, schedule_id)
    assert [(f["run_id"], f["status"], f["outcome"]) for f in listed] == [(fire["run"], "succeeded", run["answer"])]
    assert "OPS-800" in run["answer"]
    assert handed_on(cluster, fire["run"]) == ["recorded"]


def test_a_fire_whose_process_dies_mid_run_is_finished_by_the_survivor_and_recorded_once(cluster: Cluster) -> None:
    survivor = cluster.app("survivor", cron_check_s=CHECK_S)
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, cron_check_s=CHECK_S)
    survivor_id = leads(cluster, survivor)
    schedule_id = schedule_now(cluster, survivor, 801)
    fire = fired(cluster, schedule_id)
    assert fire["fired_by"] == survivor_id  # the leader fired it and handed the run to the victim
    victim.child.proc.wait(60)  # it drove the run (only a driver reaches a checkpoint) and died at its second
    run = cluster.wait_run(fire["run"])
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["losses"] == 1
    triage_writes_once(cluster, 801)
    assert len(cluster.audit(fire["run"], "agent.run.crash_resumed")) == 1
    again = fired(cluster, schedule_id)  # still one fire, its outcome recorded by the survivor's attempt
    assert (again["outcome"], again["outcome_attempt"]) == (run["answer"], run["attempt"])
    assert handed_on(cluster, fire["run"]) == ["recorded"]
    listed = fires(cluster, survivor, schedule_id)
    assert [(f["status"], f["outcome"]) for f in listed] == [("succeeded", run["answer"])]
    assert survivor.child.alive()


def test_a_fire_killed_between_its_answer_and_the_hand_on_hands_on_the_kept_answer(cluster: Cluster) -> None:
    survivor = cluster.app("survivor", cron_check_s=CHECK_S)
    victim = cluster.app("victim", fault_point="before_hand_on", cron_check_s=CHECK_S)
    survivor_id = leads(cluster, survivor)
    schedule_id = schedule_now(cluster, survivor, 802)
    fire = fired(cluster, schedule_id)
    assert fire["fired_by"] == survivor_id  # the leader fired it and handed the run to the victim
    victim.child.proc.wait(60)
    run = cluster.wait_run(fire["run"])
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert no_step_asked_twice(cluster) == 4  # triage's four steps, each asked once: never again
    triage_writes_once(cluster, 802)
    kept = cluster.rows("SELECT answer, handed_on_at FROM answers WHERE run_id = %s", fire["run"])
    assert kept[0]["answer"] == run["answer"] and kept[0]["handed_on_at"] is not None
    again = fired(cluster, schedule_id)
    assert (again["outcome"], again["outcome_attempt"]) == (run["answer"], run["attempt"])
    assert handed_on(cluster, fire["run"]) == ["recorded"]  # recorded by the survivor, once
    assert len(cluster.audit(fire["run"], "agent.run.answered")) == 1
    resumed = cluster.audit(fire["run"], "agent.run.crash_resumed")
    assert [r["detail"]["handing_on"] for r in resumed] == [True]
    assert [(f["status"], f["outcome"]) for f in fires(cluster, survivor, schedule_id)] == [
        ("succeeded", run["answer"])
    ]


def test_with_crash_resume_entries_false_a_lost_fire_ends_failed_naming_the_setting(cluster: Cluster) -> None:
    survivor = cluster.app("survivor", crash_resume_entries=False, cron_check_s=CHECK_S)
    victim = cluster.app(
        "victim", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False, cron_check_s=CHECK_S
    )
    survivor_id = leads(cluster, survivor)
    schedule_id = schedule_now(cluster, survivor, 803)
    fire = fired(cluster, schedule_id)
    assert fire["fired_by"] == survivor_id
    victim.child.proc.wait(60)
    run = cluster.wait_run(fire["run"])
    assert run["status"] == "failed", (run, cluster.logs())
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in run["error"]
    listed = fires(cluster, survivor, schedule_id)
    assert [(f["status"], f["outcome"]) for f in listed] == [("failed", None)]
    assert "TICKETIQ_CRASH_RESUME_ENTRIES is false" in listed[0]["reason"]
    assert survivor.child.alive()
