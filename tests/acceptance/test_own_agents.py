"""Your own agent against the stand-ins (issue 33, part 3), and what a mistaken request is told (part 5):
the real `ticketiq standins --scripts DIR` and `ticketiq serve` as subprocesses over one Postgres."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import create_token
from tests.support.http import web
from ticketiq.operate.launch import Child, start_serve, start_standins

# An agents file of one's own: `mine` has a script in the folder, `stranger` names a model with none.
AGENTS = """\
agents:
  mine:
    model: mine
    system_prompt: Read the Jira issue named in the request and say its summary.
    tools: [jira_get_issue]
    owner: me
  stranger:
    model: gpt-4o-mini
    system_prompt: Anything.
    tools: [jira_get_issue]
    owner: me
"""
SCRIPT = """\
steps:
  - calls:
      - tool: jira_get_issue
        arguments:
          issue_key: "{jira_key}"
  - text: "Mine read {jira_key}: {result:jira_get_issue.fields.summary|no summary}."
"""


@pytest.fixture
def own_stack(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Path, dict[str, str]]]:
    """Stand-ins with a scripts folder of our own, an app process with our agents file; the env's token."""
    scripts = tmp_path / "my-scripts"
    scripts.mkdir()
    (scripts / "mine.yaml").write_text(SCRIPT)
    agents = tmp_path / "agents.yaml"
    agents.write_text(AGENTS)
    env = {
        **os.environ,
        "TICKETIQ_DATABASE_URL": db_url,
        "TICKETIQ_HOME": str(tmp_path / "home"),
        "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret",
        "TICKETIQ_AGENTS": str(agents),
        "TICKETIQ_MODEL_MAX_RETRIES": "0",
    }
    env.pop("TICKETIQ_STANDIN_SCRIPTS", None)
    children: list[Child] = []
    try:
        token = create_token(env, "own-agents", "admin")
        standins = start_standins(env, tmp_path, "--scripts", str(scripts))
        children.append(standins)
        app, base = start_serve({**env, **standins.env}, tmp_path)
        children.append(app)
        yield base, scripts, {"Authorization": f"Bearer {token}"}
    finally:
        for child in reversed(children):
            child.stop()


def _ended(base: str, run_id: str, auth: dict[str, str], timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = web.get(f"{base}/v1/runs/{run_id}", headers=auth).json()
        if run["status"] in ("succeeded", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end: {run}")


def test_own_agent_and_script_run_and_a_model_without_script_names_the_file(
    own_stack: tuple[str, Path, dict[str, str]],
) -> None:
    base, scripts, auth = own_stack
    mine = web.post(f"{base}/v1/runs", json={"agent": "mine", "input": "Look at OPS-77"}, headers=auth)
    assert mine.status_code == 201, mine.text
    run = _ended(base, mine.json()["id"], auth)
    assert run["status"] == "succeeded", run
    # Our script's answer, filled from what the Jira stand-in answered the call our script asked for.
    assert run["answer"] == "Mine read OPS-77: Invoice PDF is blank.", run

    stranger = web.post(f"{base}/v1/runs", json={"agent": "stranger", "input": "OPS-78"}, headers=auth)
    assert stranger.status_code == 201, stranger.text
    failed = _ended(base, stranger.json()["id"], auth)
    assert failed["status"] == "failed", failed
    # The run's failure names the file to write, in the folder the stand-ins were given.
    assert str(scripts.resolve() / "gpt-4o-mini.yaml") in str(failed["error"]), failed


def test_unknown_agent_is_answered_with_the_agents_there_are(own_stack: tuple[str, Path, dict[str, str]]) -> None:
    base, _, auth = own_stack
    answer = web.post(f"{base}/v1/runs", json={"agent": "nobody", "input": "x"}, headers=auth)
    assert answer.status_code == 404, answer.text
    message = answer.json()["detail"][0]["msg"]
    assert "'nobody'" in message and "the agents: mine, stranger" in message, message


def test_a_body_without_json_content_type_is_told_which_to_send(own_stack: tuple[str, Path, dict[str, str]]) -> None:
    base, _, auth = own_stack
    answer = web.post(
        f"{base}/v1/runs",
        content=b'{"agent": "mine", "input": "OPS-79"}',
        headers={**auth, "Content-Type": "text/plain"},
    )
    assert answer.status_code == 415, answer.text
    detail = answer.json()["detail"][0]
    assert detail["loc"] == ["header", "content-type"], detail
    assert "application/json" in detail["msg"] and "text/plain" in detail["msg"], detail
    runs = web.get(f"{base}/v1/runs", headers=auth).json()
    assert not (runs.get("runs") if isinstance(runs, dict) else runs), runs  # nothing was made
    # The same body as JSON is taken: only the content type was wrong.
    taken = web.post(f"{base}/v1/runs", json={"agent": "mine", "input": "OPS-79"}, headers=auth)
    assert taken.status_code == 201, taken.text


def test_the_variable_reaches_standins_started_as_cluster_and_demo_start_them(db_url: str, tmp_path: Path) -> None:
    # `ticketiq cluster` and `ticketiq demo` start the stand-ins with start_standins and their own
    # environment, no --scripts: TICKETIQ_STANDIN_SCRIPTS set there is what the stand-ins read.
    scripts = tmp_path / "from-the-variable"
    scripts.mkdir()
    (scripts / "mine.yaml").write_text(SCRIPT)
    env = {**os.environ, "TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp_path / "home"),
           "TICKETIQ_STANDIN_SCRIPTS": str(scripts)}  # fmt: skip
    standins = start_standins(env, tmp_path)
    try:
        models = web.get(f"{standins.env['TICKETIQ_MODEL_BASE_URL']}/models").json()
        names = {m["id"] for m in models["data"]}
        assert {"mine", "triage"} <= names, names  # ours beside the shipped ones
    finally:
        standins.stop()
