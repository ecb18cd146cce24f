"""Agents whose tools are MCP servers' (issue 33, part 1): real `ticketiq serve` processes over one Postgres,
the stand-in model following scripts of our own folder, and the stand-ins' MCP server reached over
Streamable HTTP (`/mcp`) and over stdio (`python -m ticketiq.standins.mcp_stdio`, a child of each app
process). A process SIGKILLed while an MCP write is in flight is taken over: a destructive call the server
got is never sent again (the model is told the outcome is unknown), a trusted idempotent one is sent again
with the same arguments."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import Cluster
from tests.support.http import web

AGENTS = """\
mcp_servers:
  notes:
    url: ${{TICKETIQ_STANDIN_MCP_URL}}
    headers: {{Authorization: "Bearer ${{NOTES_TOKEN}}"}}
    trust_annotations: true
  local:
    command: [{python}, -m, ticketiq.standins.mcp_stdio]
    env: {{TICKETIQ_STANDIN_DATABASE_URL: "${{TICKETIQ_DATABASE_URL}}"}}
agents:
  http-noter:
    model: http-noter
    system_prompt: Note the ticket, then read the note back.
    tools: [notes.set_note, notes.get_note]
    owner: ops-bot
  stdio-noter:
    model: stdio-noter
    system_prompt: Add the request to the ticket's notebook.
    tools: [local.add_note]
    owner: ops-bot
  cleaner:
    model: cleaner
    system_prompt: Write the ticket's scratch note, then delete it.
    tools: [notes.set_note, notes.delete_note]
    owner: ops-bot
"""
CLI = [sys.executable, "-m", "ticketiq.cli"]
NOTES_TOKEN = "notes-token-0123456789abcdef"
SCRIPTS = {
    "http-noter": """\
steps:
  - calls:
      - tool: notes__set_note
        arguments: {note_id: "{jira_key}", text: "seen: {input}"}
  - calls:
      - tool: notes__get_note
        arguments: {note_id: "{jira_key}"}
  - text: "{jira_key} reads: {result:notes__get_note.text|nothing}"
""",
    "stdio-noter": """\
steps:
  - calls:
      - tool: local__add_note
        arguments: {notebook: "{jira_key}", text: "{input}"}
  - text: "Added {result:local__add_note.note_id|no note} to {jira_key}."
""",
    "cleaner": """\
steps:
  - calls:
      - tool: notes__set_note
        arguments: {note_id: "{jira_key}-scratch", text: scratch}
  - calls:
      - tool: notes__delete_note
        arguments: {note_id: "{jira_key}-scratch"}
  - text: "Cleaned {jira_key}: {result:notes__delete_note.existed|outcome unknown}."
""",
}


@pytest.fixture
def mcp_cluster(make_cluster: Callable[..., Cluster], tmp_path: Path) -> tuple[Cluster, dict[str, str]]:
    scripts = tmp_path / "my-scripts"
    scripts.mkdir()
    for model, script in SCRIPTS.items():
        (scripts / f"{model}.yaml").write_text(script)
    agents = tmp_path / "agents.yaml"
    agents.write_text(AGENTS.format(python=sys.executable))
    # I14: a write in doubt waits out its budget before it is settled; short, so the test is.
    env = {"TICKETIQ_AGENTS": str(agents), "TICKETIQ_WRITE_BUDGET_S": "4", "NOTES_TOKEN": NOTES_TOKEN}
    cluster = make_cluster("--scripts", str(scripts))
    # The stand-in MCP server asks for the token from now on: the header the agents file builds carries it.
    web.post(f"{cluster.standin_url}/_standin/options", json={"mcp_token": NOTES_TOKEN}, timeout=10).raise_for_status()
    return cluster, env


def mcp_writes(cluster: Cluster, operation: str, target: str) -> list[dict[str, Any]]:
    return cluster.writes(vendor="mcp", operation=operation, target=target)


def test_agents_whose_tools_are_an_http_and_a_stdio_mcp_servers_run_to_success(
    mcp_cluster: tuple[Cluster, dict[str, str]],
) -> None:
    cluster, env = mcp_cluster
    app = cluster.app("only", lead=True, env=env)
    over_http = cluster.post_run(app, "http-noter", "OPS-901 the printer is on fire")
    over_stdio = cluster.post_run(app, "stdio-noter", "OPS-902 the VPN drops every hour")
    run = cluster.wait_run(over_http)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["answer"] == "OPS-901 reads: seen: OPS-901 the printer is on fire", run
    run = cluster.wait_run(over_stdio)
    assert run["status"] == "succeeded", (run, cluster.logs())
    [added] = mcp_writes(cluster, "add_note", "OPS-902")  # recorded by the stdio server, in the same write log
    assert added["effect"] == "applied"
    assert run["answer"].startswith("Added ") and run["answer"].endswith(" to OPS-902."), run
    assert len(mcp_writes(cluster, "set_note", "OPS-901")) == 1
    # Each call kept the class it was planned with (I10): a trusted idempotent write, a read, a plain write.
    classes = {r["tool"]: r["class"] for r in cluster.rows(
        "SELECT tool, class FROM calls WHERE run_id IN (%s, %s)", over_http, over_stdio)}  # fmt: skip
    assert classes == {"notes__set_note": "idempotent_write", "notes__get_note": "read", "local__add_note": "write"}
    # Each process says how its MCP servers answer it.
    [process] = web.get(f"{app.base}/v1/processes", headers=cluster.auth, timeout=10).json()["processes"]
    states = {s["name"]: (s["state"], s["transport"]) for s in process["mcp_servers"]}
    assert states == {"notes": ("ready", "streamable-http"), "local": ("ready", "stdio")}
    # The token the header carried reached the server, never a log line or a transcript.
    assert NOTES_TOKEN not in cluster.logs()
    assert not cluster.rows("SELECT 1 FROM transcripts WHERE body::text LIKE %s", f"%{NOTES_TOKEN}%")


def test_a_destructive_mcp_call_in_flight_when_its_process_dies_is_never_sent_again(
    mcp_cluster: tuple[Cluster, dict[str, str]],
) -> None:
    cluster, env = mcp_cluster
    survivor = cluster.app("survivor", lead=True, env=env)
    victim = cluster.app("victim", lead=False, env=env)
    hold = {"vendor": "mcp", "operation": "delete_note", "mode": "hold", "stall_s": 60}
    web.post(f"{cluster.standin_url}/_standin/faults", json=hold, timeout=10).raise_for_status()
    run_id = cluster.post_run(victim, "cleaner", "OPS-903 clean up")
    cluster.wait_until(lambda: len(mcp_writes(cluster, "delete_note", "OPS-903-scratch")) == 1, 30, "the delete held")
    [marked] = cluster.rows("SELECT status, class FROM calls WHERE run_id = %s AND tool = 'notes__delete_note'", run_id)
    assert (marked["status"], marked["class"]) == ("in_doubt", "write")  # marked before it was sent (I2)
    victim.child.kill()  # SIGKILL, with the server holding its answer
    assert victim.child.proc.returncode == -9

    run = cluster.wait_run(run_id, timeout_s=90)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["losses"] == 1
    assert len(mcp_writes(cluster, "delete_note", "OPS-903-scratch")) == 1  # the server got it once, ever
    # The model was told the outcome is unknown and that it was not sent again.
    [call] = cluster.rows(
        "SELECT status, settlement, outcome FROM calls WHERE run_id = %s AND tool = 'notes__delete_note'", run_id
    )
    assert (call["status"], call["settlement"]) == ("settled", "unknown_not_sent"), call
    message = call["outcome"]["result"]["message"]
    assert "outcome unknown" in message and "it was not sent again" in message, call
    assert run["answer"] == "Cleaned OPS-903: outcome unknown.", run
    # The settlement is audited (I8).
    [settled] = cluster.audit(run_id, "agent.call.settled_unknown")
    assert settled["detail"]["tool"] == "notes__delete_note" and settled["detail"]["class"] == "write"
    [resumed] = cluster.audit(run_id, "agent.run.crash_resumed")
    assert {c["tool"]: c["happened"] for c in resumed["detail"]["calls"]} == {"notes__delete_note": "unknown_not_sent"}
    assert survivor.child.alive()


def test_a_trusted_idempotent_mcp_call_in_flight_is_sent_again_with_the_same_arguments(
    mcp_cluster: tuple[Cluster, dict[str, str]],
) -> None:
    cluster, env = mcp_cluster
    survivor = cluster.app("survivor", lead=True, env=env)
    victim = cluster.app("victim", lead=False, env=env)
    hold = {"vendor": "mcp", "operation": "set_note", "mode": "hold", "stall_s": 60, "count": 1}
    web.post(f"{cluster.standin_url}/_standin/faults", json=hold, timeout=10).raise_for_status()
    run_id = cluster.post_run(victim, "http-noter", "OPS-904 disk full")
    cluster.wait_until(lambda: len(mcp_writes(cluster, "set_note", "OPS-904")) == 1, 30, "the set held")
    victim.child.kill()
    assert victim.child.proc.returncode == -9

    run = cluster.wait_run(run_id, timeout_s=90)
    assert run["status"] == "succeeded", (run, cluster.logs())
    assert run["answer"] == "OPS-904 reads: seen: OPS-904 disk full", run
    sent = mcp_writes(cluster, "set_note", "OPS-904")
    assert len(sent) == 2 and sent[0]["body"] == sent[1]["body"], sent  # the same arguments, on purpose
    [resumed] = cluster.audit(run_id, "agent.run.crash_resumed")
    assert {c["tool"]: c["happened"] for c in resumed["detail"]["calls"]} == {"notes__set_note": "resent_same_args"}
    assert survivor.child.alive()


def test_a_tool_its_server_does_not_list_stops_the_start_and_a_server_down_does_not(
    mcp_cluster: tuple[Cluster, dict[str, str]], tmp_path: Path
) -> None:
    cluster, _ = mcp_cluster
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "mcp_servers:\n  notes: {url: '${TICKETIQ_STANDIN_MCP_URL}',\n"
        "          headers: {Authorization: 'Bearer ${NOTES_TOKEN}'}}\n"
        "agents:\n  a: {system_prompt: x, owner: me, tools: [notes.get_note, notes.teleport]}\n"
    )
    env = {**cluster.env, "TICKETIQ_AGENTS": str(wrong), "TICKETIQ_HOME": str(tmp_path / "home"),
           "NOTES_TOKEN": NOTES_TOKEN}  # fmt: skip
    # Refused before it serves (were it not, it would serve until the timeout).
    done = subprocess.run([*CLI, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("ticketiq: ")]
    assert "MCP server notes does not list the tool teleport (notes.teleport); it lists: " in line, line
    assert "get_note" in line and str(wrong) in line, line

    # A server no one answers at: the process starts, stays ready, and says which server is unreachable.
    down = tmp_path / "down.yaml"
    down.write_text(
        "mcp_servers:\n  gone: {url: 'http://127.0.0.1:9/mcp'}\n"
        "agents:\n  a: {model: a, system_prompt: x, owner: me, tools: [gone.anything]}\n"
    )
    app = cluster.app("down", lead=True, env={"TICKETIQ_AGENTS": str(down)})
    assert web.get(f"{app.base}/readyz", timeout=10).status_code == 200
    [process] = web.get(f"{app.base}/v1/processes", headers=cluster.auth, timeout=10).json()["processes"]
    [gone] = process["mcp_servers"]
    assert (gone["name"], gone["state"]) == ("gone", "unreachable") and gone["error"], gone
