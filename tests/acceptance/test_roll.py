"""`ticketiq cluster roll` under steady load through the edge: every app process is replaced by a new one,
one at a time, and no client request fails. Then a broken release (an agents file the new process refuses)
stops the roll at its first process: the roll exits 1 and the old processes keep serving."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.cluster import create_token
from tests.support.cluster_process import cli, cluster_env, end_cluster, gone, launch_cluster, pids, wait_for_count
from tests.support.edge_load import Load
from tests.support.http import web
from ticketiq.operate.launch import free_port
from ticketiq.settings import Settings


def statuses(db_url: str, ids: list[str]) -> dict[str, str]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        rows = conn.execute("SELECT id::text, status FROM runs WHERE id = ANY(%s::uuid[])", (ids,)).fetchall()
    return {r["id"]: r["status"] for r in rows}


def jira_comments(standins: str, ticket: int) -> list[dict[str, Any]]:
    got = web.get(
        f"{standins}/_standin/writes", params={"vendor": "jira", "target": f"OPS-{9000 + ticket}"}, timeout=30
    )
    got.raise_for_status()
    return [w for w in got.json() if w["effect"] == "applied"]


def held_back(base: str, load: Load, ticket: int) -> bool:
    """Whether the ticket's run says its comment was never sent: its one call failed, certainly (no uncertain
    outcome), before a byte of it left (tools/http.py: the write's window closed first)."""
    said = web.get(f"{base}/v1/runs/{load.runs[ticket]}/transcript", headers=load.auth, timeout=30).json()
    calls = [e for e in said["entries"] if e["kind"] == "call" and e["tool"] == "jira_add_comment"]
    result = calls[0]["result"] if len(calls) == 1 and not calls[0]["ok"] else None
    return isinstance(result, dict) and "outcome" not in result and "budget was spent before" in result["error"]


def what_became_of(standins: str, base: str, load: Load, ticket: int) -> str:
    """A ticket whose comment was not made once: every write on its issue, its POST's tries and its run's
    timeline, to tell a doubled write from a lost one and see which process made each."""
    writes = web.get(f"{standins}/_standin/writes", params={"target": load.issue(ticket)}, timeout=30).json()
    timeline = web.get(f"{base}/v1/runs/{load.runs[ticket]}/timeline", headers=load.auth, timeout=30)
    said = web.get(f"{base}/v1/runs/{load.runs[ticket]}/transcript", headers=load.auth, timeout=30)
    results = [e for e in said.json().get("entries", []) if e.get("kind") in ("call", "result", "settled")]
    return (f"{load.issue(ticket)}: run {load.runs[ticket]}, POST tries {load.posts.get(ticket)}\n"
            f"writes: {writes}\ntimeline ({timeline.status_code}): {timeline.text[:20000]}\n"
            f"calls: {results or said.text[:20000]}")  # fmt: skip


@pytest.mark.long
def test_a_roll_under_load_replaces_every_process_and_fails_no_request_and_a_broken_release_stops_it(
    tmp_path: Path, db_url: str
) -> None:
    port = free_port()
    env = cluster_env(tmp_path, db_url)
    agents = tmp_path / "agents.yaml"
    agents.write_text(Path(str(Settings().agents)).read_text())
    env["TICKETIQ_AGENTS"] = str(agents)
    proc, lines = launch_cluster(env, port)
    before = pids(lines)
    try:
        standins = next(line.split()[3] for line in lines if line.startswith("stand-ins"))
        token = create_token(env, "roller", "operator")
        load = Load(f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}, uuid.uuid4().hex[:8])
        client = threading.Thread(target=load.run, daemon=True)
        client.start()
        time.sleep(1.0)
        began = time.monotonic()
        rolled = subprocess.run(cli("cluster", "roll"), env=env, capture_output=True, text=True,
                                timeout=300)  # fmt: skip
        took = time.monotonic() - began
        assert rolled.returncode == 0, (rolled.stdout, rolled.stderr, "".join(lines))
        said = rolled.stdout
        for name in ("app1", "app2"):
            assert f"{name}: the edge drained pid {before[name]}" in said, said
            assert f"pid {before[name]} handed its runs over and exited" in said, said
        assert said.rstrip().endswith("rolled: every app process replaced"), said
        wait_for_count(lines, "(rolled)", 2, 10)
        # Probes answered after the roll, a few (a turn waits for its POST's answer: on a busy machine a
        # fixed pause could pass without one).
        rolled_at = began + took
        deadline = time.monotonic() + 30
        while sum(1 for at, _, _ in list(load.readyz) if at > rolled_at + 0.5) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        load.halt.set()
        client.join(60)
        after = pids(lines)
        assert {n: after[n] for n in ("app1", "app2")} != {n: before[n] for n in ("app1", "app2")}
        assert all(after[n] != before[n] and gone(before[n]) and not gone(after[n]) for n in ("app1", "app2"))

        # No request through the edge failed, and every submission was made once and answered 201 at once.
        # A probe the process answered 503 because its database took over a second (entries/probes.py) is the
        # machine's load, with or without a roll, and said honestly; a few may come on a loaded machine. One
        # the edge answered, or no answer at all, never may.
        slow = [r for r in load.readyz if r[1] == 503 and "did not answer within" in r[2]]
        assert [r for r in load.readyz if r[1] != 200 and r not in slow] == []
        assert len(slow) <= len(load.readyz) // 20, slow
        assert [(t, s) for t, s in load.posts.items() if s != [201]] == []
        assert len(load.runs) >= 10, f"too little load to judge: {len(load.runs)} runs in {took:.1f} s"
        # After the roll only the new processes answer.
        late = {who for at, status, who in load.readyz if at > rolled_at + 0.5 and status == 200}
        assert late and all(who.split(":")[1] in (str(after["app1"]), str(after["app2"])) for who in late), late

        # Every run succeeded, and no comment was made twice, whichever process the run was on when the roll came.
        ids = list(load.runs.values())
        deadline = time.monotonic() + 60
        while set((found := statuses(db_url, ids)).values()) - {"succeeded"}:
            assert time.monotonic() < deadline, {k: v for k, v in found.items() if v != "succeeded"}
            time.sleep(0.2)
        assert len(found) == len(ids)
        # Each was made once, but for one whose try the engine held back (I14): on a starved machine its bytes had
        # not left when its window closed (the lease deadline it had at its mark), so nothing was sent, the run's
        # record says so, the model was told and nothing sends it again (I9). Any other count is explained here.
        base = f"http://127.0.0.1:{port}"
        made = {t: len(jira_comments(standins, t)) for t in load.runs}
        odd = [t for t, n in made.items() if n > 1 or (n == 0 and not held_back(base, load, t))]
        assert odd == [], "\n".join(what_became_of(standins, base, load, t) for t in odd)

        # A broken release: the new process refuses its agents file. The roll stops at app1, which keeps serving.
        agents.write_text("agents: [this is not an agent\n")
        broken = subprocess.run(cli("cluster", "roll"), env=env, capture_output=True, text=True, timeout=300)
        assert broken.returncode == 1, (broken.stdout, broken.stderr)
        assert "roll failed: app1: the new process exited with code" in broken.stdout, broken.stdout
        assert f"the roll stops here and pid {after['app1']} keeps serving" in broken.stdout
        assert "app2" not in broken.stdout
        assert proc.poll() is None
        serving = {web.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()["process"] for _ in range(6)}
        assert {who.split(":")[1] for who in serving} == {str(after["app1"]), str(after["app2"])}

        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(lines)
        wait_for_count(lines, "stopped edge", 1, 10)
        assert not (Path(env["TICKETIQ_HOME"]) / "cluster.pid").exists()
    finally:
        end_cluster(proc, lines, list(before.values()))


@pytest.mark.long
def test_a_roll_while_a_dead_process_waits_to_start_again_replaces_it_once(tmp_path: Path, db_url: str) -> None:
    port = free_port()
    env = cluster_env(tmp_path, db_url)
    proc, lines = launch_cluster(env, port)
    before = pids(lines)
    try:
        os.kill(before["app2"], signal.SIGKILL)
        wait_for_count(lines, "starting it again in 1 s", 1, 10)
        rolled = subprocess.run(cli("cluster", "roll"), env=env, capture_output=True, text=True, timeout=300)
        assert rolled.returncode == 0, (rolled.stdout, "".join(lines))
        wait_for_count(lines, "(rolled)", 2, 10)
        time.sleep(3)  # past the start again that was pending: it must not come
        said = "".join(lines)
        assert "started again" not in said, said  # the roll's process took the slot; no second one on its port
        assert said.count("was killed by") == 1 and "exited with code" not in said, said
        serving = {web.get(f"http://127.0.0.1:{port}/readyz", timeout=10).json()["process"] for _ in range(6)}
        assert len(serving) == 2
    finally:
        end_cluster(proc, lines, list(before.values()))
