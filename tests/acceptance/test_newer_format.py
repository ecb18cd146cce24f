"""Versioned checkpoints (issue 31): runs whose checkpoints a newer release wrote, beside a process of this
release. When the newer release's process dies, this one leaves its runs alone: it does not take them,
fail them, rewrite them or count a loss; it logs each once, lists them in GET /v1/processes, and each
run's `waiting_for` says it waits for a process that knows its format. A process of the newer release
started later takes them and finishes them, each write once. The newer release resumes this one's
checkpoints in turn (a release reads every format from the previous release's onwards)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.previous_release.test_side_by_side import _ready, each_write_once
from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.engine import resume
from ticketiq.operate.launch import Child, free_port

REPO = Path(__file__).resolve().parents[2]
TRIAGE = "Triage OPS-{n}: checkout is failing"
MODEL_LATENCY_MS = 700  # a triage run spans some 3 s: the kill lands while runs are going
NEWER = resume.THIS_RELEASE.state_format + 1
FAST_LEASES = {"lease_ttl_s": "3", "lease_renew_s": "1"}  # a left lease lapses (and is listed) sooner


def start_newer(cluster: Cluster, name: str, **settings: str) -> App:
    """A `ticketiq serve` of the next release (tests/support/newer_release.py), tracked by the cluster."""
    port = free_port()
    env = {**cluster.env, "PYTHONPATH": str(REPO)}
    env.update({f"TICKETIQ_{k.upper()}": v for k, v in {**FAST_LEASES, **settings}.items()})
    log_path = cluster.tmp / f"{name}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "tests.support.newer_release", "serve", "--port", str(port)],
                                env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    app = App(Child(name, proc, log_path, env), f"http://127.0.0.1:{port}")
    cluster.apps.append(app)
    cluster.wait_until(lambda: proc.poll() is not None or _ready(app), 60, f"{name} ready")
    assert proc.poll() is None, app.child.log_tail()
    return app


def checkpoint(cluster: Cluster, run_id: str) -> dict[str, Any]:
    rows = cluster.rows("SELECT attempt, step, losses, state, seal, state_format, seal_format, written_at "
                        "FROM checkpoints WHERE run_id = %s", run_id)  # fmt: skip
    return rows[0]


def processes(cluster: Cluster, app: App) -> dict[str, Any]:
    response = web.get(f"{app.base}/v1/processes", headers=cluster.auth, timeout=10)
    response.raise_for_status()
    shown: dict[str, Any] = response.json()
    return shown


@pytest.mark.long
def test_a_newer_releases_runs_wait_for_a_process_that_knows_their_format_and_then_finish(
    make_cluster: Callable[..., Cluster],
) -> None:
    cluster = make_cluster("--model-latency-ms", str(MODEL_LATENCY_MS))
    today = cluster.app(
        "today", lead=True, lease_ttl_s=FAST_LEASES["lease_ttl_s"], lease_renew_s=FAST_LEASES["lease_renew_s"]
    )
    newer = start_newer(cluster, "newer-1", lead="false")
    shown = {p["pid"]: p for p in processes(cluster, today)["processes"]}
    assert (shown[today.pid]["state_format"], shown[newer.pid]["state_format"]) == (
        resume.THIS_RELEASE.state_format,
        NEWER,
    )

    # Runs on the newer release write its format; its process dies with them in flight.
    tickets = [4301, 4302]
    runs = {n: cluster.post_run(newer, "triage", TRIAGE.format(n=n)) for n in tickets}
    cluster.wait_until(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), 60, "every run's first step")
    os.kill(newer.pid, signal.SIGKILL)
    newer.child.proc.wait(10)
    written = {run_id: checkpoint(cluster, run_id) for run_id in runs.values()}
    assert {c["state_format"] for c in written.values()} == {NEWER}

    # Today's process (the leader) finds the dead process and leaves its runs: listed once their leases lapse.
    def listed() -> set[str]:
        return {r["run_id"] for r in processes(cluster, today)["left_for_newer_release"]}

    cluster.wait_until(lambda: listed() == set(runs.values()), 30, "the newer release's runs listed as left")
    for run_id in runs.values():
        run = web.get(f"{today.base}/v1/runs/{run_id}", headers=cluster.auth, timeout=10).json()
        assert run["status"] == "running", run
        assert run["waiting_for"] == {
            "kind": "release", "state_format": NEWER, "seal_format": resume.THIS_RELEASE.seal_format,
            "question": resume.waits_for_release(NEWER, resume.THIS_RELEASE.seal_format),
        }, run  # fmt: skip
    # Several sweeps later: never taken, failed, rewritten or counted as a loss; each logged once.
    cluster.wait_until(lambda: today.child.log_tail(200000).count("is left for a newer release") >= len(runs), 30,
                       "the leader's log of the left runs")  # fmt: skip
    time.sleep(4)  # nothing is to happen: a few more sweeps (every second or so) pass by the left runs
    assert {run_id: checkpoint(cluster, run_id) for run_id in runs.values()} == written
    for run_id in runs.values():
        assert today.child.log_tail(200000).count(f"run {run_id} is left for a newer release") == 1
        assert {a["process"] for a in cluster.rows("SELECT process FROM run_attempts WHERE run_id = %s", run_id)} \
            == {newer_id(cluster, newer.pid)}  # fmt: skip

    # A process of the newer release comes: the leader gives it the runs, which finish, each write once.
    newer2 = start_newer(cluster, "newer-2", lead="false")
    for n, run_id in runs.items():
        done = cluster.wait_run(run_id, 90)
        assert (done["status"], done["losses"], done["attempt"]) == ("succeeded", 1, 2), (n, cluster.logs())
    assert processes(cluster, today)["left_for_newer_release"] == []
    each_write_once(cluster, tickets)

    # The newer release resumes this release's checkpoints: today's process dies with runs in flight.
    older = {n: cluster.post_run(today, "triage", TRIAGE.format(n=n)) for n in (4303, 4304)}
    cluster.wait_until(lambda: all(cluster.run(r)["step"] >= 1 for r in older.values()), 60, "today's runs' first step")
    assert {checkpoint(cluster, r)["state_format"] for r in older.values()} == {resume.THIS_RELEASE.state_format}
    newer3 = start_newer(cluster, "newer-3", lead="true")  # leads once today's process is gone
    os.kill(today.pid, signal.SIGKILL)
    for n, run_id in older.items():
        assert cluster.wait_run(run_id, 90)["status"] == "succeeded", (n, cluster.logs())
    each_write_once(cluster, [4303, 4304])
    assert newer2.child.alive() and newer3.child.alive()


def newer_id(cluster: Cluster, pid: int) -> str:
    return str(cluster.rows("SELECT id FROM processes WHERE pid = %s ORDER BY started_at DESC LIMIT 1", pid)[0]["id"])
