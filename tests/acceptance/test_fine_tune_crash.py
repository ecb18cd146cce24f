"""The fine-tuning job survives the death of its process (issue 10 part 3; I13, I14), with real
`ticketiq serve` processes and stand-ins as subprocesses: the process holding the job is SIGKILLed
while it follows the remote job, and while its create is in doubt (sent, no answer yet). The
survivor's job worker finishes it, and the stand-in's write log shows one training file and one remote
fine-tuning job, each made once."""

from __future__ import annotations

import os
import signal
from typing import Any

from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.jobs import training_file

BASE = "gpt-4o-mini-2024-07-18"
EXAMPLES = [
    {"messages": [{"role": "user", "content": f"Refund for order {n}?"}, {"role": "assistant", "content": "billing"}]}
    for n in range(10)
]
ENDED = ("succeeded", "failed", "cancelled", "interrupted")


def standin(cluster: Cluster, path: str, body: dict[str, Any]) -> None:
    web.post(f"{cluster.standin_url}/_standin/{path}", json=body, timeout=30).raise_for_status()


def post_fine_tune(cluster: Cluster, app: Any) -> str:
    params = {"model": BASE, "training": {"examples": EXAMPLES}, "suffix": "crash", "poll_s": 0.1}
    made = web.post(
        f"{app.base}/v1/jobs", json={"kind": "fine_tune", "params": params}, headers=cluster.auth, timeout=30
    )
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def job(cluster: Cluster, job_id: str) -> dict[str, Any]:
    return cluster.rows("SELECT * FROM jobs WHERE id = %s", job_id)[0]


def wait_job(cluster: Cluster, job_id: str, timeout_s: float = 90.0) -> dict[str, Any]:
    cluster.wait_until(lambda: job(cluster, job_id)["status"] in ENDED, timeout_s, f"job {job_id} ending")
    return job(cluster, job_id)


def made_once(cluster: Cluster, job_id: str) -> tuple[str, str]:
    """The one training file and the one remote job the job made: (file id, remote job id)."""
    files = cluster.writes(vendor="openai", operation="upload_file")
    creates = cluster.writes(vendor="openai", operation="create_fine_tuning_job")
    assert [(w["key"], w["effect"]) for w in files] == [(training_file.file_name(job_id), "applied")]
    assert [(w["key"], w["effect"]) for w in creates] == [(f"ticketiq_job={job_id}", "applied")]
    return str(files[0]["ref"]), str(creates[0]["ref"])


def test_a_job_killed_while_it_follows_the_remote_job_is_finished_by_the_survivor(cluster: Cluster) -> None:
    standin(cluster, "options", {"fine_tune_duration_s": 600})  # it runs until the test finishes it
    victim = cluster.app("victim", lead=False)
    job_id = post_fine_tune(cluster, victim)
    cluster.wait_until(
        lambda: (job(cluster, job_id)["state"].get("remote") or {}).get("status") is not None,
        60,
        "the victim following the remote job",
    )
    doomed = job(cluster, job_id)
    survivor = cluster.app("survivor", lead=True)
    os.kill(victim.pid, signal.SIGKILL)
    cluster.wait_until(lambda: job(cluster, job_id)["attempt"] >= 2, 60, "the survivor taking the job on")
    remote_id = doomed["state"]["remote"]["id"]
    web.post(f"{cluster.standin_url}/_standin/fine_tuning/jobs/{remote_id}/finish", timeout=30).raise_for_status()

    row = wait_job(cluster, job_id)
    assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), (row["error"], cluster.logs())
    assert app_of(cluster, [victim, survivor], doomed["holder"]) is victim
    assert app_of(cluster, [victim, survivor], row["holder"]) is survivor
    file_id, created = made_once(cluster, job_id)
    assert created == remote_id
    assert row["result"]["remote_job"] == remote_id and row["result"]["training_file"] == file_id
    assert row["result"]["fine_tuned_model"] == f"ft:{BASE}:ticketiq:crash:{remote_id.removeprefix('ftjob-')[:8]}"
    # The survivor only looked: every write came from the victim.
    clients = [w["client"] for w in cluster.rows("SELECT client FROM standin.writes WHERE vendor = 'openai'")]
    assert [f"pid/{victim.pid} " in f"{client} " for client in clients] == [True, True]


def test_a_job_killed_with_its_create_in_doubt_finds_the_remote_job_and_creates_none(cluster: Cluster) -> None:
    """The create is held at the stand-in (a stall) when its process is SIGKILLed: sent, unanswered, and
    applied by the stand-in after the sender died. The survivor waits out the mark's window (I14: the
    6 s write budget, past the 3 s stall), lists jobs by the job's key, finds the remote job and follows
    it to its end: no second create."""
    standin(cluster, "options", {"fine_tune_duration_s": 1})
    standin(
        cluster, "faults", {"vendor": "openai", "mode": "stall", "stall_s": 3, "operation": "create_fine_tuning_job"}
    )
    apps = [cluster.app(name, lead=True, write_budget_s=6) for name in ("a", "b")]
    job_id = post_fine_tune(cluster, apps[0])
    cluster.wait_until(lambda: "create" in job(cluster, job_id)["state"], 60, "the create marked in doubt")
    # The stand-in took the stall when the create reached it: sent, and held there.
    cluster.wait_until(lambda: pending_faults(cluster) == [], 30, "the create reaching the stand-in")
    doomed = job(cluster, job_id)
    victim = app_of(cluster, apps, doomed["holder"])
    os.kill(victim.pid, signal.SIGKILL)
    assert cluster.writes(vendor="openai", operation="create_fine_tuning_job") == []  # still held at the stand-in
    survivor = next(app for app in apps if app is not victim)

    row = wait_job(cluster, job_id)
    assert (row["status"], row["attempt"], row["losses"]) == ("succeeded", 2, 1), (row["error"], cluster.logs())
    assert app_of(cluster, apps, row["holder"]) is survivor
    file_id, remote_id = made_once(cluster, job_id)
    assert row["result"]["remote_job"] == remote_id and row["result"]["training_file"] == file_id
    assert "create" not in row["state"]  # settled: found, not created again
    # The one create is the victim's, applied after it died; the survivor only looked it up.
    sent_by = cluster.rows("SELECT client FROM standin.writes WHERE operation = 'create_fine_tuning_job'")
    assert [f"pid/{victim.pid} " in f"{w['client']} " for w in sent_by] == [True]


def pending_faults(cluster: Cluster) -> list[Any]:
    answer = web.get(f"{cluster.standin_url}/_standin/faults", timeout=30)
    answer.raise_for_status()
    pending: list[Any] = answer.json()
    return pending


def app_of(cluster: Cluster, apps: list[App], holder: str) -> App:
    """The app process a holder identity names (its pid in `processes`)."""
    pid = cluster.rows("SELECT pid FROM processes WHERE id = %s", holder)[0]["pid"]
    return next(app for app in apps if app.pid == pid)
