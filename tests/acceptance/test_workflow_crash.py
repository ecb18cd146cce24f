"""A workflow run killed mid-way with real `ticketiq serve` processes over one Postgres (issue 10 part 5;
I9, I11, I13, I14): the sample agents file's `follow-up` workflow (read a Jira issue, the reader agent
summarises it, comment, check, and loop back to comment once more).

The victim starts alone and its job worker takes the run; only then does the survivor start, so the
victim is surely the one that dies holding it. The victim SIGKILLs itself at a named point
(TICKETIQ_FAULT_POINT); the survivor leads, sweeps the job back and its worker finishes it from the
last written step. The stand-ins' records show each comment applied exactly once per step execution,
with that execution's key; the agent step's run is made once.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.engine.step_keys import workflow_step_key

EXECUTED = ["read", "summarise", "comment", "check", "comment", "check"]
BUDGET_S = 3  # the write budget: a comment in doubt is read back this long after its mark (I14)


def start(cluster: Cluster, app: App, issue: str) -> str:
    made = web.post(f"{app.base}/v1/workflows/follow-up/runs", json={"input": {"issue": issue}},
                      headers=cluster.auth, timeout=30)  # fmt: skip
    assert made.status_code == 201, made.text
    return str(made.json()["id"])


def job(cluster: Cluster, run_id: str) -> dict[str, Any]:
    return cluster.rows("SELECT * FROM jobs WHERE id = %s", run_id)[0]


def shown(cluster: Cluster, app: App, run_id: str) -> dict[str, Any]:
    got = web.get(f"{app.base}/v1/workflows/follow-up/runs/{run_id}", headers=cluster.auth, timeout=30)
    assert got.status_code == 200, got.text
    found: dict[str, Any] = got.json()
    return found


def killed_mid_workflow(cluster: Cluster, issue: str, **fault: Any) -> tuple[str, App]:
    """The victim takes the run and dies at the fault; the survivor is started once the victim holds it."""
    victim = cluster.app("victim", write_budget_s=BUDGET_S, **fault)
    holder = web.get(f"{victim.base}/readyz", timeout=10).json()["process"]
    run_id = start(cluster, victim, issue)
    cluster.wait_until(lambda: job(cluster, run_id)["holder"] == holder, 30, "the victim's worker taking the run")
    survivor = cluster.app("survivor", write_budget_s=BUDGET_S)
    victim.child.proc.wait(60)  # it SIGKILLs itself at the point
    cluster.wait_until(lambda: job(cluster, run_id)["status"] in ("succeeded", "failed"), 90, "the run ending")
    return run_id, survivor


def comments_once_per_execution(cluster: Cluster, run_id: str, issue: str) -> None:
    """Two comment executions (seq 3 and 5): each applied exactly once, carrying its own key."""
    keys = [workflow_step_key(run_id, "comment", 2), workflow_step_key(run_id, "comment", 4)]
    writes = cluster.writes(vendor="jira", operation="add_comment", target=issue)
    assert [(w["key"], w["effect"]) for w in writes] == [(keys[0], "applied"), (keys[1], "applied")], writes


@pytest.mark.parametrize(
    ("point", "settled"),
    [
        # The first comment marked in doubt, never sent: read back once it can no longer be in flight,
        # not there, sent once with its key.
        ("after_mark", "sent_once"),
        # The first comment sent, its outcome not written: read back by its key and found, not sent again.
        ("after_send", "found"),
    ],
)
def test_a_workflow_killed_at_its_write_ends_on_the_survivor_with_each_comment_once(
    cluster: Cluster, point: str, settled: str
) -> None:
    issue = "OPS-901" if point == "after_mark" else "OPS-902"
    run_id, survivor = killed_mid_workflow(cluster, issue, fault_point=point, fault_after=1)
    row = job(cluster, run_id)
    assert row["status"] == "succeeded", (row, cluster.logs())
    assert (row["attempt"], row["losses"]) == (2, 1)
    comments_once_per_execution(cluster, run_id, issue)
    run = shown(cluster, survivor, run_id)
    assert [s["step"] for s in run["steps"]] == EXECUTED
    assert [s["settled"] for s in run["steps"] if s["step"] == "comment"] == [settled, None]
    assert [s["key"] for s in run["steps"]] == [workflow_step_key(run_id, s, n) for n, s in enumerate(EXECUTED)]
    lost = cluster.rows("SELECT detail FROM audit_log WHERE action = 'job.lost'")
    assert [d["detail"]["job_id"] for d in lost] == [run_id]
    assert survivor.child.alive()


def test_a_workflow_killed_in_its_agent_step_finds_the_run_it_made(cluster: Cluster) -> None:
    """Killed after the reader agent's second model step was checkpointed: the run is resumed as any
    run, and the workflow's agent step, executed again on the survivor, waits for that same run."""
    issue = "OPS-950"
    run_id, survivor = killed_mid_workflow(cluster, issue, fault_point="after_checkpoint", fault_after=2)
    row = job(cluster, run_id)
    assert row["status"] == "succeeded", (row, cluster.logs())
    assert (row["attempt"], row["losses"]) == (2, 1)
    runs = cluster.rows("SELECT r.id::text, r.status, r.answer, r.idempotency_key, c.losses FROM runs r "
                        "JOIN checkpoints c ON c.run_id = r.id")  # fmt: skip
    step = shown(cluster, survivor, run_id)["steps"][1]
    assert len(runs) == 1, runs
    run_key = f"workflow\t{step['key']}"  # run_keys.workflow_step
    assert (runs[0]["id"], runs[0]["idempotency_key"], runs[0]["losses"]) == (step["run_id"], run_key, 1)
    assert runs[0]["answer"] == step["output"] and issue in step["output"]
    comments_once_per_execution(cluster, run_id, issue)
    assert survivor.child.alive()
