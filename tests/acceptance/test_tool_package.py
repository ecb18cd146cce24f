"""A tool from an installed Python package (examples/ticketiq-tasks, issue 33 part 2) driven as a built-in one
is: real `ticketiq serve` processes over one Postgres, the stand-in model following a script of our own, and
the package's tasks service on a real socket. A process SIGKILLed while its `tasks_create` is in flight is
taken over, and the create is settled by the package's reader: found (never sent again) or, absent, sent once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.cluster import Cluster
from tests.support.http import web
from ticketiq.operate.launch import Child, free_port

AGENTS = """\
agents:
  tasker:
    model: tasker
    system_prompt: Create a follow-up task for the ticket named in the request, then say which task it is.
    tools: [tasks_create]
    owner: ops-bot
"""
SCRIPT = """\
steps:
  - calls:
      - tool: tasks_create
        arguments:
          title: "Follow up {jira_key}"
          notes: "{input}"
  - text: "Created {result:tasks_create.task_id|no task} for {jira_key}."
"""


@dataclass
class TasksService:
    """The example package's vendor, `python -m ticketiq_tasks.service`, as its own process."""

    child: Child
    base: str

    def tasks(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = web.get(f"{self.base}/tasks", timeout=10).json()["tasks"]
        return found

    def creates(self) -> list[dict[str, Any]]:
        received: list[dict[str, Any]] = web.get(f"{self.base}/_service/creates", timeout=10).json()
        return received

    def hold_next(self, when: str, seconds: float = 60.0) -> None:
        web.post(f"{self.base}/_service/hold", json={"when": when, "seconds": seconds}, timeout=10).raise_for_status()


@pytest.fixture
def tasks_service(tmp_path: Path) -> Iterator[TasksService]:
    port = free_port()
    log_path = tmp_path / "tasks-service.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ticketiq_tasks.service", "--port", str(port)], stdout=log, stderr=log
        )
    service = TasksService(Child("tasks-service", proc, log_path), f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, service.child.log_tail()
            try:
                service.creates()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"the tasks service did not answer:\n{service.child.log_tail()}"
                time.sleep(0.05)
        yield service
    finally:
        service.child.stop()


@pytest.fixture
def tasks_cluster(
    make_cluster: Callable[..., Cluster], tasks_service: TasksService, tmp_path: Path
) -> tuple[Cluster, TasksService, dict[str, str]]:
    """Stand-ins with our script for the `tasker` model; the env an app process needs for the package's tool."""
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "tasker.yaml").write_text(SCRIPT)
    agents = tmp_path / "agents.yaml"
    agents.write_text(AGENTS)
    env = {
        "TICKETIQ_AGENTS": str(agents),
        "TICKETIQ_TASKS_URL": tasks_service.base,  # read by the package itself, not by ticketiq's settings
        # I14: a write in doubt is read back once its budget from the mark is spent; short, so the test is.
        "TICKETIQ_WRITE_BUDGET_S": "4",
    }
    return make_cluster("--scripts", str(scripts)), tasks_service, env


def test_a_run_calls_the_package_tool_and_creates_one_task_keyed_by_its_step(
    tasks_cluster: tuple[Cluster, TasksService, dict[str, str]],
) -> None:
    cluster, service, env = tasks_cluster
    app = cluster.app("only", lead=True, env=env)
    run_id = cluster.post_run(app, "tasker", "The customer on OPS-801 asks for a call back")
    run = cluster.wait_run(run_id)
    assert run["status"] == "succeeded", (run, cluster.logs())
    [task] = service.tasks()
    assert task["title"] == "Follow up OPS-801"
    assert run["answer"] == f"Created {task['id']} for OPS-801.", run
    # The step key went where the vendor can find the task again: its client_ref.
    [call] = cluster.rows("SELECT tool, class, sent_key, status FROM calls WHERE run_id = %s", run_id)
    assert (call["tool"], call["class"], call["status"]) == ("tasks_create", "write", "done")
    assert task["client_ref"] == call["sent_key"]


@pytest.mark.parametrize(
    ("when", "happened", "creates"),
    [
        # The task stored, its answer held when the process died: read back by client_ref, found, not sent again.
        ("after_store", "found", 1),
        # The request held before the task was stored, then dropped: read back, nothing there, sent once.
        ("before_store", "sent_once", 2),
    ],
)
def test_a_process_killed_while_the_package_tool_is_in_flight_is_settled_by_its_reader(
    tasks_cluster: tuple[Cluster, TasksService, dict[str, str]], when: str, happened: str, creates: int
) -> None:
    cluster, service, env = tasks_cluster
    survivor = cluster.app("survivor", lead=True, env=env)
    victim = cluster.app("victim", lead=False, env=env)
    service.hold_next(when)
    run_id = cluster.post_run(victim, "tasker", "The customer on OPS-802 asks for a call back")
    cluster.wait_until(lambda: any(c["held"] for c in service.creates()), 30, "the create held at the service")
    [marked] = cluster.rows("SELECT tool, status FROM calls WHERE run_id = %s", run_id)
    assert (marked["tool"], marked["status"]) == ("tasks_create", "in_doubt")  # marked before it was sent (I2)
    victim.child.kill()  # SIGKILL, with the create in flight
    assert victim.child.proc.returncode == -9

    run = cluster.wait_run(run_id, timeout_s=90)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["losses"] == 1
    [task] = service.tasks()  # exactly one task, whichever way the create was settled
    assert run["answer"] == f"Created {task['id']} for OPS-802.", run
    received = service.creates()
    assert len(received) == creates, received
    assert [c["stored"] for c in received] == [when == "after_store", *([True] if creates == 2 else [])]
    # The settlement is audited with what happened (I8).
    [resumed] = cluster.audit(run_id, "agent.run.crash_resumed")
    assert {c["tool"]: c["happened"] for c in resumed["detail"]["calls"]} == {"tasks_create": happened}, resumed
    [call] = cluster.rows("SELECT status, settlement, sent_key FROM calls WHERE run_id = %s", run_id)
    # Found: settled from what was read back. Sent once: done, with the outcome of that one send.
    assert (call["status"], call["settlement"]) == ("settled" if happened == "found" else "done", happened), call
    assert task["client_ref"] == call["sent_key"]
    assert survivor.child.alive()
