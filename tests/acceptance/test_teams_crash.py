"""Teams turns with real `ticketiq serve` processes over one Postgres (I2, I9, I12, I13, I14).

A signed activity (a token from the stand-in Bot Framework token service) goes to a victim process that
kills itself at a named point (TICKETIQ_FAULT_POINT) while it works the turn; the survivor takes the
turn's run over and the reply is posted once. Counting the Teams writes: the triage agent itself replies
in the ops channel's thread (its `teams_reply` tool, target `19:ops@thread.tacv2;...`), and the turn's
reply goes to the thread the activity came from (target CONVERSATION). Each is applied exactly once.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import App, Cluster
from tests.support.http import web
from tests.support.trial_entries import post_teams_activity

CONVERSATION = "19:support@thread.tacv2;messageid=1700000000700"
AGENT_THREAD = "19:ops@thread.tacv2;messageid=1700000000000"  # where triage's own teams_reply goes


def send_activity(cluster: Cluster, app: App, activity_id: str, ticket: str) -> None:
    """A signed Teams message to `app`; it is acknowledged (or the process died answering)."""
    text = f"Triage {ticket}: checkout is failing"
    response = post_teams_activity(cluster, app.base, activity_id, CONVERSATION, text)
    # None: killed before its answer left; the row was stored first, or Teams delivers again.
    assert response is None or response.status_code == 201, response.text


def teams_run(cluster: Cluster) -> str:
    rows = cluster.rows("SELECT id::text AS id FROM runs WHERE channel = 'teams'")
    assert len(rows) == 1, rows
    return str(rows[0]["id"])


def applied(cluster: Cluster, **filters: str) -> list[dict[str, Any]]:
    return [w for w in cluster.writes(**filters) if w["effect"] == "applied"]


def turn_replied_once(cluster: Cluster, run_id: str, run: dict[str, Any], ticket: str) -> dict[str, Any]:
    """Exactly one reply to the activity's thread, with the card; the agent's own writes once each."""
    replies = applied(cluster, vendor="teams", target=CONVERSATION)
    assert len(replies) == 1, (replies, cluster.logs())
    card: dict[str, Any] = replies[0]["body"]["attachments"][0]["content"]
    assert card["body"][0]["text"] == run["answer"]
    assert card["actions"][0]["url"].endswith(f"/console/runs/{run_id}")
    assert len(applied(cluster, vendor="teams", target=AGENT_THREAD)) == 1
    assert len(applied(cluster, vendor="teams")) == 2  # the two threads: nothing else
    incidents = [w for w in applied(cluster, vendor="incidentio") if ticket in str(w["body"])]
    assert len(incidents) == 1, incidents
    assert len(applied(cluster, vendor="jira", target=ticket)) == 1
    return card


def inbox_entry(cluster: Cluster) -> dict[str, Any]:
    response = web.get(f"{cluster.apps[-1].base}/v1/teams/inbox", headers=cluster.auth, timeout=30)
    response.raise_for_status()
    entries: list[dict[str, Any]] = response.json()["entries"]
    assert len(entries) == 1, entries
    return entries[0]


def reply_audited(cluster: Cluster, run_id: str) -> dict[str, Any]:
    ended = cluster.audit(run_id, "agent.run.succeeded")
    assert len(ended) == 1, ended
    reply: dict[str, Any] = ended[0]["detail"]["reply"]
    assert reply["posted"] is True, reply
    return reply


def no_step_asked_twice(cluster: Cluster) -> int:
    repeated = cluster.rows(
        "SELECT conversation, step, count(*) AS n FROM standin.model_requests GROUP BY 1, 2 HAVING count(*) > 1"
    )
    assert repeated == [], repeated
    return len(cluster.rows("SELECT 1 FROM standin.model_requests"))


def test_a_turn_killed_mid_run_is_finished_by_the_survivor_and_replies_once(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2)
    cluster.app("survivor")
    send_activity(cluster, victim, "1700000000701", "OPS-701")
    run_id = teams_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded" and run["losses"] == 1, (run, cluster.logs())
    assert not victim.child.alive()
    turn_replied_once(cluster, run_id, run, "OPS-701")
    assert reply_audited(cluster, run_id)["happened"] == "made"  # by the survivor's own steps
    entry = inbox_entry(cluster)
    assert (entry["status"], entry["run_id"], entry["reason"]) == ("replied", run_id, None)


def test_a_turn_killed_between_its_answer_and_the_reply_posts_the_kept_answer_once(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="before_hand_on")
    cluster.app("survivor")
    send_activity(cluster, victim, "1700000000702", "OPS-702")
    run_id = teams_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded" and run["losses"] == 1, (run, cluster.logs())
    turn_replied_once(cluster, run_id, run, "OPS-702")
    assert no_step_asked_twice(cluster) == 4  # triage's four steps, each asked once: never again
    assert reply_audited(cluster, run_id)["happened"] == "made"
    resumed = cluster.audit(run_id, "agent.run.crash_resumed")
    assert len(resumed) == 1 and resumed[0]["detail"]["handing_on"] is True
    assert inbox_entry(cluster)["status"] == "replied"


@pytest.mark.parametrize(
    ("point", "happened"),
    [
        # The reply marked in doubt, not sent: read back once it can no longer be in flight, not there,
        # posted once.
        ("after_mark", "sent_once"),
        # The reply posted, its outcome not recorded: read back through Graph and found, not posted again.
        ("after_send", "found"),
    ],
)
def test_a_turn_killed_with_its_reply_in_doubt_reads_it_back_and_posts_it_once(
    cluster: Cluster, point: str, happened: str
) -> None:
    # The fourth write of the turn is its reply: the incident, then the comment and the agent's own
    # Teams reply (one step), then the hand-on. A short write budget shortens the wait before the read-back.
    victim = cluster.app("victim", fault_point=point, fault_after=4, write_budget_s=3)
    cluster.app("survivor", write_budget_s=3)
    send_activity(cluster, victim, "1700000000703", "OPS-703")
    run_id = teams_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded" and run["losses"] == 1, (run, cluster.logs())
    turn_replied_once(cluster, run_id, run, "OPS-703")
    assert reply_audited(cluster, run_id)["happened"] == happened
    assert no_step_asked_twice(cluster) == 4
    assert inbox_entry(cluster)["status"] == "replied"


def test_with_crash_resume_entries_false_a_lost_turn_fails_naming_the_setting(cluster: Cluster) -> None:
    victim = cluster.app("victim", fault_point="after_checkpoint", fault_after=2, crash_resume_entries=False)
    cluster.app("survivor", crash_resume_entries=False)
    send_activity(cluster, victim, "1700000000704", "OPS-704")
    run_id = teams_run(cluster)
    run = cluster.wait_run(run_id)
    assert run["status"] == "failed", (run, cluster.logs())
    entry = inbox_entry(cluster)
    assert entry["status"] == "failed" and "TICKETIQ_CRASH_RESUME_ENTRIES is false" in entry["reason"], entry
    assert applied(cluster, vendor="teams", target=CONVERSATION) == []  # no reply: the row says why
