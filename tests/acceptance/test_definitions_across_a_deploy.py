"""Agent definitions change across a deploy: a run started under the old definition resumes on a process
of the new one through the gates as they stand now. Runs wait for a person's approval of their Jira
comment on the old process; the deploy stops it and starts a new process on a changed agents file:

- the comment tool taken out of the agent's tools: the approved call is refused by the tools gate (never
  sent), and the run goes on to its answer;
- the agent removed: the run fails naming the reason, and the process goes on serving (no crash).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.settings import Settings

HELD = "jira_add_comment"


def agents(path: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    sample = yaml.safe_load(Path(str(Settings().agents)).read_text())
    sample["approval_required"] = sorted({*sample.get("approval_required", []), HELD})
    change(sample)
    path.write_text(yaml.safe_dump(sample))
    return path


def approve(cluster: Cluster, app: App, run_id: str) -> None:
    approval = cluster.rows("SELECT id::text AS id FROM approvals WHERE run_id = %s", run_id)[0]["id"]
    decided = web.post(f"{app.base}/v1/approvals/{approval}", json={"decision": "approve"}, headers=cluster.auth,
                       timeout=30)  # fmt: skip
    assert decided.status_code == 200, decided.text


def test_runs_waiting_across_a_deploy_resume_through_the_definitions_as_they_stand_now(
    make_cluster: Callable[..., Cluster], tmp_path: Path
) -> None:
    cluster = make_cluster()

    def unchanged(sample: dict[str, Any]) -> None:
        pass

    old_file = agents(tmp_path / "old.yaml", unchanged)
    old = cluster.app("old", agents=str(old_file))
    narrowed = cluster.post_run(old, "triage", "Triage OPS-3101: checkout is failing")
    removed = cluster.post_run(old, "triage", "Triage OPS-3102: checkout is failing")
    cluster.wait_until(lambda: {cluster.run(r)["status"] for r in (narrowed, removed)} == {"waiting"}, 60,
                       "both runs waiting for the approval")  # fmt: skip

    # The deploy: the old process stops; the new one reads the changed file.
    old.child.proc.send_signal(signal.SIGTERM)
    assert old.child.proc.wait(60) == -signal.SIGTERM

    def narrow(sample: dict[str, Any]) -> None:
        sample["agents"]["triage"]["tools"].remove(HELD)

    new = cluster.app("new", agents=str(agents(tmp_path / "narrowed.yaml", narrow)))
    approve(cluster, new, narrowed)
    run = cluster.wait_run(narrowed)
    assert run["status"] == "succeeded", cluster.logs()
    # Approved under the old definition, refused under the new one: never sent.
    assert [w for w in cluster.writes(vendor="jira", target="OPS-3101") if w["effect"] == "applied"] == []
    held = [r for r in cluster.rows("SELECT tool, status, outcome FROM calls WHERE run_id = %s", narrowed)
            if r["tool"] == HELD]  # fmt: skip
    assert held == [{"tool": HELD, "status": "done", "outcome": {"result": {
        "gate": "tools", "refused": f"tool {HELD} is not offered to agent triage"}}}]  # fmt: skip

    new.child.proc.send_signal(signal.SIGTERM)
    assert new.child.proc.wait(60) == -signal.SIGTERM

    def drop(sample: dict[str, Any]) -> None:
        del sample["agents"]["triage"]

    newest = cluster.app("newest", agents=str(agents(tmp_path / "dropped.yaml", drop)))
    approve(cluster, newest, removed)
    run = cluster.wait_run(removed)
    assert run["status"] == "failed" and run["error"] == "agent triage is no longer defined", run
    assert web.get(f"{newest.base}/readyz", timeout=10).status_code == 200  # it goes on serving
    assert newest.child.alive()
