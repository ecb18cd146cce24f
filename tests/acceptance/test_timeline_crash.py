"""The timeline of a run whose `ticketiq serve` process was SIGKILLed mid-write (issue 16), read over the
API of the process that took it over: both attempts, the process that lost it and the one that took it,
how long the takeover took, and the settlement of the write that was in flight."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.support.cluster import Cluster
from tests.support.http import web


@pytest.mark.long
def test_a_run_whose_process_was_killed_mid_write_shows_both_attempts_and_the_settlement(cluster: Cluster) -> None:
    survivor = cluster.app("survivor", lead=True)
    # The victim SIGKILLs itself once its second write (the Jira comment) was sent and before its outcome
    # was recorded: the write is in flight, as far as the database knows.
    victim = cluster.app("victim", lead=False, fault_point="after_send", fault_after=2, call_concurrency=1)
    run_id = cluster.post_run(victim, "triage", "Triage OPS-901: checkout is failing")
    victim.child.proc.wait(60)
    assert cluster.wait_run(run_id)["status"] == "succeeded", cluster.logs()
    lost = cluster.rows("SELECT id FROM processes WHERE pid = %s", victim.pid)[0]["id"]
    taker = web.get(f"{survivor.base}/readyz", timeout=10).json()["process"]

    response = web.get(f"{survivor.base}/v1/runs/{run_id}/timeline", headers=cluster.auth, timeout=30)
    assert response.status_code == 200, response.text
    body = response.json()
    first, second = body["attempts"]
    assert (first["attempt"], first["process"], first["ended"]) == (1, lost, "lost")
    assert (second["attempt"], second["process"], second["ended"]) == (2, taker, "finished")
    assert second["lost_detected_at"] is not None and second["taken_after_s"] is not None
    assert datetime.fromisoformat(second["first_at"]) >= datetime.fromisoformat(second["lost_detected_at"])
    settled = {c["tool"]: c["happened"] for c in second["settled"]}
    assert settled["jira_add_comment"] == "found"  # read back once it could no longer be in flight: it had landed

    calls = {c["tool"]: c for s in body["steps"] for c in s["calls"]}
    comment = calls["jira_add_comment"]
    assert comment["settled"]["by_attempt"] == 2 and comment["settled"]["happened"] == "found"
    assert (comment["status"], comment["class"]) == ("settled", "write")
    assert comment["marked_at"] is not None  # marked by the lost attempt; its send was never recorded
    incident = calls["incidentio_create_incident"]
    assert incident["settled"] is None and incident["outcome"] == "ok"  # done before the kill
    assert {s["attempt"] for s in body["steps"]} == {1, 2}
    assert body["run"]["losses"] == 1
