"""Background jobs in real `ticketiq serve` processes, one SIGKILLed mid-job (issue 10; I13): a
resumable job is queued again and the survivor's worker goes on from its last save, each step once; a
job that is not resumable ends `interrupted` with the reason. The processes know the test kinds of
`tests/support/job_kinds.py` (through their own `sitecustomize`)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from tests.support import job_kinds
from tests.support.cluster import App, Cluster
from tests.support.http import web

ENDED = ("succeeded", "failed", "cancelled", "interrupted")


def two_apps(cluster: Cluster) -> tuple[App, App]:
    env = job_kinds.serving_with_test_kinds(cluster.tmp / "kinds")
    return cluster.app("first", env=env, lead=True), cluster.app("second", env=env, lead=True)


def post_job(cluster: Cluster, app: App, kind: str, **params: Any) -> str:
    made = web.post(f"{app.base}/v1/jobs", json={"kind": kind, "params": params}, headers=cluster.auth, timeout=30)
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def job(cluster: Cluster, job_id: str) -> dict[str, Any]:
    return cluster.rows("SELECT * FROM jobs WHERE id = %s", job_id)[0]


def kill_holder(cluster: Cluster, apps: tuple[App, App], job_id: str) -> App:
    """SIGKILL the process running the job; return the survivor."""
    holder = job(cluster, job_id)["holder"]
    [pid] = [r["pid"] for r in cluster.rows("SELECT pid FROM processes WHERE id = %s", holder)]
    victim = next(app for app in apps if app.pid == pid)
    os.kill(victim.pid, signal.SIGKILL)
    victim.child.proc.wait(10)
    return next(app for app in apps if app is not victim)


@pytest.mark.long
def test_a_resumable_job_goes_on_from_its_last_save_on_the_survivor(cluster: Cluster) -> None:
    apps = two_apps(cluster)
    job_id = post_job(cluster, apps[0], "count", to=60, step_ms=100)
    cluster.wait_until(lambda: job(cluster, job_id)["progress_done"] >= 10, 60, "ten steps saved")
    survivor = kill_holder(cluster, apps, job_id)
    cluster.wait_until(lambda: job(cluster, job_id)["status"] in ENDED, 90, "the job ending")
    row = job(cluster, job_id)
    assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), (row["error"], cluster.logs())
    assert row["result"]["counted"] == 60 and 10 <= row["result"]["resumed_from"] < 60
    assert row["result"]["attempt"] == 2 and row["progress_done"] == 60
    [pid] = [r["pid"] for r in cluster.rows("SELECT pid FROM processes WHERE id = %s", row["holder"])]
    assert pid == survivor.pid  # finished by the survivor's worker
    lost = cluster.rows("SELECT detail FROM audit_log WHERE action = 'job.lost'")
    assert [(r["detail"]["job_id"], r["detail"]["status"]) for r in lost] == [(job_id, "queued")]


def test_a_job_that_is_not_resumable_ends_interrupted_with_the_reason(cluster: Cluster) -> None:
    apps = two_apps(cluster)
    job_id = post_job(cluster, apps[1], "count_once", to=60, step_ms=100)
    cluster.wait_until(lambda: job(cluster, job_id)["progress_done"] >= 5, 60, "five steps saved")
    holder = job(cluster, job_id)["holder"]
    survivor = kill_holder(cluster, apps, job_id)
    cluster.wait_until(lambda: job(cluster, job_id)["status"] in ENDED, 60, "the job ending")
    row = job(cluster, job_id)
    assert (row["status"], row["attempt"], row["losses"]) == ("interrupted", 1, 1), cluster.logs()
    assert row["error"] == (f"interrupted: the process running it stopped ({holder} died); "
                            f"restart it with POST /v1/jobs/{job_id}/restart")  # fmt: skip
    shown = web.get(f"{survivor.base}/v1/jobs/{job_id}", headers=cluster.auth, timeout=30).json()
    assert (shown["status"], shown["error"]) == ("interrupted", row["error"])
