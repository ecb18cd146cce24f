"""A `ticketiq serve` process told to stop (SIGTERM: a roll, a deploy) hands its runs over: each stops at
its next step boundary and goes on at once on another live process, without a loss counted and without
waiting for its lease to lapse (8 s) or for the sweep's grace for queued runs (5 s). Every write once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

from tests.acceptance.test_crash_resume import TRIAGE, triage_writes_once
from tests.support.cluster import Cluster

# Each model step takes this long at the stand-in: a triage run (three steps and the answer) is in flight
# for some 4 s, and the stop lands in the middle of one of its steps.
MODEL_LATENCY_MS = 900


def test_a_stopped_process_hands_its_run_over_at_a_step_boundary_and_another_takes_it_at_once(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster("--model-latency-ms", str(MODEL_LATENCY_MS))
    leaving = cluster.app("leaving", shutdown_grace_s=30)
    staying = cluster.app("staying")
    run_id = cluster.post_run(leaving, "triage", TRIAGE.format(n=31))
    cluster.wait_until(lambda: cluster.run(run_id)["step"] >= 1, 30, "the run's first step")
    stopped_at = time.monotonic()
    leaving.child.proc.send_signal(signal.SIGTERM)
    assert leaving.child.proc.wait(30) == -signal.SIGTERM, leaving.child.log_tail()
    # Within the grace (30 s) but at the step's end, not at the run's: the step in flight finished.
    assert time.monotonic() - stopped_at < 5, "the process waited for the run to end, not for its step"
    run = cluster.wait_run(run_id, 60)
    assert run["status"] == "succeeded", cluster.logs()
    assert run["losses"] == 0
    attempts = cluster.rows(
        "SELECT attempt, process, started_at, ended_at, ended FROM run_attempts WHERE run_id = %s ORDER BY attempt",
        run_id,
    )
    assert [a["ended"] for a in attempts] == ["handed_back", "finished"], attempts
    gave, took = attempts
    assert took["process"] != gave["process"]
    # Taken at once: well before the lease would lapse or a queued run would be swept.
    assert (took["started_at"] - gave["ended_at"]).total_seconds() < 2.0, attempts
    triage_writes_once(cluster, 31)
    assert "handed run" in leaving.child.log_tail(20_000)
    assert staying.child.alive()
