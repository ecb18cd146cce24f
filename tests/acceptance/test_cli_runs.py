"""`ticketiq runs ...` and `ticketiq approvals ...` as a person runs them: the real CLI as subprocesses
against a real app process (`ticketiq serve`) and the stand-ins, over one Postgres.

One app serves the module; each test makes its own runs with tokens of its own, so what one lists is its
own. The sample agents file ships `closer`, whose `jira_transition` is held for a person's approval.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support import postgres, preforked
from tests.support.cluster import create_token
from tests.support.http import web
from ticketiq.operate.launch import Child, free_port, start_serve, start_standins

ENDED = ("succeeded", "failed", "interrupted", "stopped")


class Stack:
    def __init__(self, base: str, standin: str, env: dict[str, str], serve_env: dict[str, str], tmp: Path) -> None:
        self.base = base
        self.standin = standin  # the stand-ins' base URL
        self.env = env  # TICKETIQ_URL is the app; no TICKETIQ_TOKEN: each test sets its own
        self.serve_env = serve_env  # what another app process over the same database and stand-ins runs with
        self.tmp = tmp

    def token(self, role: str) -> str:
        return self.named_token(role)[1]

    def named_token(self, role: str) -> tuple[str, str]:
        """A token of its own (its name and itself), made by the real CLI."""
        name = f"{role}-{uuid.uuid4().hex[:8]}"
        return name, create_token(self.env, name, role)

    def cli(self, token: str | None, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env=self.cli_env(token), timeout=timeout_s)

    def cli_env(self, token: str | None) -> dict[str, str]:
        env = {**self.env, "COLUMNS": "250"}  # wide enough that no table cell is cut
        if token is not None:
            env["TICKETIQ_TOKEN"] = token
        return env

    def watch(self, token: str, run_id: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "ticketiq.cli", "runs", "watch", run_id], env=self.cli_env(token),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def start(self, token: str, agent: str, text: str) -> str:
        made = web.post(f"{self.base}/v1/runs", json={"agent": agent, "input": text}, headers=auth(token))
        assert made.status_code == 201, made.text
        return str(made.json()["id"])

    def run(self, token: str, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = web.get(f"{self.base}/v1/runs/{run_id}", headers=auth(token)).json()
        return found

    def until(self, token: str, run_id: str, statuses: tuple[str, ...], timeout_s: float = 90) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            run = self.run(token, run_id)
            if run["status"] in statuses:
                return run
            if time.monotonic() > deadline:
                raise AssertionError(f"run {run_id} is {run['status']}, never {statuses}: {run}")
            time.sleep(0.1)

    def pending_approval(self, token: str, run_id: str) -> dict[str, Any]:
        self.until(token, run_id, ("waiting",))
        listed = web.get(f"{self.base}/v1/approvals", headers=auth(token)).json()["approvals"]
        [held] = [a for a in listed if a["run_id"] == run_id]
        return dict(held)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def stack(pg: postgres.SuitePostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("cli-runs")
    db_url = pg.fresh_database()
    env = {k: v for k, v in os.environ.items() if k not in ("TICKETIQ_TOKEN", "TICKETIQ_URL")}
    env |= {"TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp / "home"),
            "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret"}  # fmt: skip
    children: list[Child] = []
    try:
        standins = start_standins(env, tmp)
        children.append(standins)
        app, base = start_serve({**env, **standins.env}, tmp)
        children.append(app)
        standin = standins.env["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")
        yield Stack(base, standin, {**env, "TICKETIQ_URL": base}, {**env, **standins.env}, tmp)
    finally:
        for child in reversed(children):
            child.stop()
        pg.give_back(db_url)


def page(base: str, run_id: str) -> str:
    return f"{base}/console/runs/{run_id}"


def test_list_shows_a_callers_own_runs_filtered_and_as_the_apis_json(stack: Stack) -> None:
    mine = stack.token("caller")
    someone, theirs = stack.named_token("caller")
    done = stack.start(mine, "triage", "Triage OPS-401: checkout fails")
    asking = stack.start(mine, "asker", "Note OPS-402")
    other = stack.start(theirs, "reader", "Read OPS-403")
    stack.until(mine, done, ("succeeded",))
    stack.until(mine, asking, ("waiting",))
    stack.until(theirs, other, ("succeeded",))

    listed = stack.cli(mine, "runs", "list")
    assert listed.returncode == 0, listed.stderr
    assert done in listed.stdout and asking in listed.stdout and other not in listed.stdout  # its own runs only
    assert "succeeded" in listed.stdout and "waiting" in listed.stdout
    assert "input: Which environment does OPS-402 concern?" in listed.stdout  # what the waiting run waits for
    assert f"a run's page: {stack.base}/console/runs/<run id>" in listed.stdout

    def ids(*args: str) -> list[str]:
        shown = stack.cli(mine, "runs", "list", "--json", *args)
        assert shown.returncode == 0, shown.stderr
        return [r["id"] for r in json.loads(shown.stdout)["runs"]]

    assert ids() == [asking, done]  # newest first
    assert ids("--status", "waiting") == [asking]
    assert ids("--status", "waiting", "--status", "succeeded") == [asking, done]
    assert ids("--agent", "triage") == [done]
    assert ids("--channel", "api", "--agent", "asker") == [asking]
    assert ids("--channel", "teams") == []
    waiting = json.loads(stack.cli(mine, "runs", "list", "--json", "--status", "waiting").stdout)["runs"][0]
    assert waiting["waiting_for"]["kind"] == "input" and waiting["waiting_for"]["question_id"]
    first = json.loads(stack.cli(mine, "runs", "list", "--json", "--limit", "1").stdout)
    assert [r["id"] for r in first["runs"]] == [asking] and first["next_cursor"]
    rest = stack.cli(mine, "runs", "list", "--json", "--limit", "1", "--cursor", first["next_cursor"])
    assert [r["id"] for r in json.loads(rest.stdout)["runs"]] == [done]
    by_owner = stack.cli(stack.token("admin"), "runs", "list", "--json", "--created-by", someone)
    assert [r["id"] for r in json.loads(by_owner.stdout)["runs"]] == [other]  # an admin sees every run


def test_show_gives_the_timeline_of_a_finished_run(stack: Stack) -> None:
    token = stack.token("operator")
    run_id = stack.start(token, "triage", "Triage OPS-410: checkout fails")
    stack.until(token, run_id, ("succeeded",))

    shown = stack.cli(token, "runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert page(stack.base, run_id) in out and "succeeded" in out and "Triaged OPS-410" in out
    for heading in ("attempts", "steps", "calls", "CALLS LEFT IN FLIGHT", "MARKED / SENT / OUTCOME", "SETTLED"):
        assert heading in out
    for tool in ("jira_get_issue", "incidentio_create_incident", "jira_add_comment", "teams_reply"):
        assert tool in out
    timeline = json.loads(stack.cli(token, "runs", "show", run_id, "--json").stdout)
    assert timeline == web.get(f"{stack.base}/v1/runs/{run_id}/timeline", headers=auth(token)).json()
    assert [a["attempt"] for a in timeline["attempts"]] == [1]
    assert timeline["attempts"][0]["process"] in out
    writes = [c for s in timeline["steps"] for c in s["calls"] if c["class"] != "read"]
    assert len(writes) == 3 and all(c["key"] in out for c in writes)  # each write's key, in the ledger


def test_watch_follows_a_run_to_its_end_and_exits_by_how_it_ended(stack: Stack) -> None:
    token = stack.token("operator")
    run_id = stack.start(token, "triage", "Triage OPS-420: checkout fails")
    watching = stack.watch(token, run_id)
    try:
        out, err = watching.communicate(timeout=120)
    finally:
        watching.kill()
    assert watching.returncode == 0, err
    assert f"following run {run_id}: {page(stack.base, run_id)}" in out
    assert "step 3" in out and "#0 jira_add_comment [write]" in out
    assert f"end      run {run_id} succeeded" in out
    assert out.rstrip().endswith(f"run {run_id}: succeeded  {page(stack.base, run_id)}")

    # A run that waits, followed live, then stopped: watch sees it end `stopped` and exits 1.
    asking = stack.start(token, "asker", "Note OPS-421")
    stack.until(token, asking, ("waiting",))
    watching = stack.watch(token, asking)
    try:
        assert watching.stdout is not None
        seen = [watching.stdout.readline()]  # following ...; then, once it follows, the run's status
        while seen[-1] and not seen[-1].startswith("status"):
            seen.append(watching.stdout.readline())
        stopped = stack.cli(token, "runs", "stop", asking)
        out, err = watching.communicate(timeout=120)
    finally:
        watching.kill()
    assert seen[-1].startswith("status   waiting"), seen
    assert stopped.returncode == 0, stopped.stderr
    assert f"stop requested for run {asking}" in stopped.stdout and page(stack.base, asking) in stopped.stdout
    assert stack.run(token, asking)["status"] == "stopped"
    assert watching.returncode == 1, err
    assert f"end      run {asking} stopped" in out and f"run {asking}: stopped" in out

    # Watching a run that ended already says how it ended at once.
    again = stack.cli(token, "runs", "watch", asking)
    assert again.returncode == 1 and f"run {asking}: stopped" in again.stdout


def test_watch_follows_a_run_again_when_the_process_serving_its_events_dies(stack: Stack) -> None:
    """The app process that serves the stream is SIGKILLed while the run waits; another takes its port.
    The watch follows the run again through it and sees it end, given its input meanwhile."""
    token = stack.token("operator")
    port = free_port()
    first, base = start_serve(stack.serve_env, stack.tmp, port=port, name="watched-1")
    children = [first]
    try:
        run_id = stack.start(token, "asker", "Note OPS-425")
        stack.until(token, run_id, ("waiting",))
        watching = subprocess.Popen(
            [sys.executable, "-m", "ticketiq.cli", "--url", base, "runs", "watch", run_id],
            env=stack.cli_env(token), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert watching.stdout is not None
            seen = [watching.stdout.readline()]
            while seen[-1] and not seen[-1].startswith("status"):
                seen.append(watching.stdout.readline())
            first.kill()  # the stream's process dies under it
            second, _ = start_serve(stack.serve_env, stack.tmp, port=port, name="watched-2")
            children.append(second)
            given = web.post(f"{base}/v1/runs/{run_id}/input", headers={**auth(token), "Idempotency-Key": run_id},
                               json={"text": "staging"})  # fmt: skip
            assert given.status_code == 202, given.text
            out, err = watching.communicate(timeout=180)
        finally:
            watching.kill()
    finally:
        for child in reversed(children):
            child.stop()
    assert seen[-1].startswith("status   waiting"), seen
    assert watching.returncode == 0, err
    assert "(the event stream was cut; following again" in out
    assert out.rstrip().endswith(f"run {run_id}: succeeded  {page(base, run_id)}")


def test_watch_follows_on_across_the_ends_of_its_streams_and_stops_when_its_token_is_revoked(stack: Stack) -> None:
    """Served by a process whose streams last a second (TICKETIQ_STREAM_MAX_S): the watch follows the run
    on from each stream's last id, so what it printed is printed once, and it sees the run end. A watch
    whose token is revoked stops, saying so."""
    token = stack.token("operator")
    admin = stack.token("admin")
    short, base = start_serve({**stack.serve_env, "TICKETIQ_STREAM_MAX_S": "1"}, stack.tmp, name="short-streams")
    try:
        run_id = stack.start(token, "asker", "Note OPS-426")
        stack.until(token, run_id, ("waiting",))

        def watch(who: str) -> subprocess.Popen[str]:
            return subprocess.Popen(
                [sys.executable, "-m", "ticketiq.cli", "--url", base, "runs", "watch", run_id],
                env=stack.cli_env(who), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip

        watching = watch(token)
        name, doomed = stack.named_token("operator")
        revoked = watch(doomed)
        try:
            assert watching.stdout is not None and revoked.stdout is not None
            firsts: list[list[str]] = []
            for process in (watching, revoked):
                seen = [process.stdout.readline()]  # type: ignore[union-attr]
                while seen[-1] and not seen[-1].startswith("status"):
                    seen.append(process.stdout.readline())  # type: ignore[union-attr]
                firsts.append(seen)
            time.sleep(3.5)  # three streams end under each watch
            gone = web.delete(f"{base}/v1/tokens/{name}", headers=auth(admin))
            assert gone.status_code == 200, gone.text
            _, revoked_err = revoked.communicate(timeout=60)
            given = web.post(f"{base}/v1/runs/{run_id}/input", headers={**auth(token), "Idempotency-Key": run_id},
                             json={"text": "staging"})  # fmt: skip
            assert given.status_code == 202, given.text
            out, err = watching.communicate(timeout=120)
        finally:
            watching.kill()
            revoked.kill()
    finally:
        short.stop()
    assert watching.returncode == 0, err
    lines = [line for line in "".join(firsts[0]).splitlines() + out.splitlines() if line.strip()]
    assert len(lines) == len(set(lines)), out  # nothing printed twice across the streams' ends
    assert sum(line.startswith("status   waiting") for line in lines) == 1, out
    assert "cut" not in out and out.rstrip().endswith(f"run {run_id}: succeeded  {page(base, run_id)}")
    assert revoked.returncode == 2, revoked_err
    assert "refused TICKETIQ_TOKEN (401)" in revoked_err and "revoked" in revoked_err


def test_input_answers_a_waiting_run(stack: Stack) -> None:
    token = stack.token("caller")
    run_id = stack.start(token, "asker", "Note OPS-430")
    stack.until(token, run_id, ("waiting",))
    given = stack.cli(token, "runs", "input", run_id, "staging")  # the oldest question, under a key made here
    assert given.returncode == 0, given.stderr
    assert f"input given to run {run_id}" in given.stdout and page(stack.base, run_id) in given.stdout
    assert stack.until(token, run_id, ENDED)["answer"] == "Noted OPS-430 for staging."

    named = stack.start(token, "asker", "Note OPS-431")
    question = stack.until(token, named, ("waiting",))["waiting_for"]["question_id"]
    given = stack.cli(token, "runs", "input", named, "production", "--question", question)
    assert given.returncode == 0, given.stderr
    assert f"for question {question}" in given.stdout
    assert stack.until(token, named, ENDED)["answer"] == "Noted OPS-431 for production."
    # The question was answered: another input for it is a conflict the API names; exit 1.
    late = stack.cli(token, "runs", "input", named, "staging", "--question", question)
    assert late.returncode == 1
    assert "(409)" in late.stderr and "body.question_id" in late.stderr


def test_approvals_are_listed_approved_and_rejected(stack: Stack) -> None:
    token = stack.token("operator")
    approve = stack.start(token, "closer", "Close OPS-440")
    held = stack.pending_approval(token, approve)
    reject = stack.start(token, "closer", "Close OPS-441")
    refused = stack.pending_approval(token, reject)

    listed = stack.cli(token, "approvals", "list")
    assert listed.returncode == 0, listed.stderr
    assert held["id"] in listed.stdout and refused["id"] in listed.stdout and approve in listed.stdout
    assert "jira_transition" in listed.stdout and '"transition": "Done"' in listed.stdout
    as_json = json.loads(stack.cli(token, "approvals", "list", "--json").stdout)
    assert {held["id"], refused["id"]} <= {a["id"] for a in as_json["approvals"]}
    run = stack.run(token, approve)
    assert run["waiting_for"] == {**run["waiting_for"], "kind": "approval", "approval_id": held["id"],
                                  "tool": "jira_transition"}  # fmt: skip

    approved = stack.cli(token, "approvals", "approve", held["id"])
    assert approved.returncode == 0, approved.stderr
    assert "approved: jira_transition" in approved.stdout and page(stack.base, approve) in approved.stdout
    assert stack.until(token, approve, ENDED)["answer"] == "OPS-440 status after the transition: Done."
    rejected = stack.cli(token, "approvals", "reject", refused["id"], "--reason", "not before the release")
    assert rejected.returncode == 0, rejected.stderr
    assert "rejected: jira_transition" in rejected.stdout
    ended = stack.until(token, reject, ENDED)
    assert ended["answer"] == "OPS-441 status after the transition: unchanged (the transition was not made)."
    moved = web.get(f"{stack.standin}/_standin/writes", params={"vendor": "jira", "operation": "transition"}).json()
    assert [w["target"] for w in moved if w["effect"] == "applied"] == ["OPS-440"]  # the rejected one never sent

    decided = stack.cli(token, "approvals", "list", "--status", "rejected", "--json")
    [shown] = [a for a in json.loads(decided.stdout)["approvals"] if a["id"] == refused["id"]]
    assert shown["reason"] == "not before the release" and shown["decided_by"].startswith("operator-")
    late = stack.cli(token, "approvals", "reject", held["id"], "--reason", "changed my mind")
    assert late.returncode == 1 and "(409)" in late.stderr  # decided already
    caller = stack.cli(stack.token("caller"), "approvals", "list")
    assert caller.returncode == 2 and "(403)" in caller.stderr and "header.Authorization" in caller.stderr


def test_url_and_token_flags_win_over_the_variables(stack: Stack) -> None:
    token = stack.token("operator")
    dead = f"http://127.0.0.1:{free_port()}"
    env = {**stack.cli_env("tiq_" + "x" * 43), "TICKETIQ_URL": dead}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env=env, timeout=120)

    before = run("--url", stack.base, "--token", token, "runs", "list", "--json")
    after = run("runs", "list", "--json", "--url", stack.base, "--token", token)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert "runs" in json.loads(before.stdout)
    unreachable = run("runs", "list")  # the variables: nobody listens there
    assert unreachable.returncode == 1
    assert f"cannot reach the API at {dead}" in unreachable.stderr and "TICKETIQ_URL" in unreachable.stderr
    refused = run("--url", stack.base, "runs", "list")  # the variable's token, which the API does not know
    assert refused.returncode == 2
    assert f"the API at {stack.base} refused TICKETIQ_TOKEN (401): header.Authorization:" in refused.stderr
    assert "--url" in run("--url", dead, "--token", token, "runs", "list").stderr


def test_errors_say_what_to_do(stack: Stack) -> None:
    token = stack.token("operator")
    no_token = stack.cli(None, "runs", "list")
    assert no_token.returncode == 2
    assert "TICKETIQ_TOKEN is not set and no --token was given" in no_token.stderr
    unknown = str(uuid.uuid4())
    missing = stack.cli(token, "runs", "show", unknown)
    assert missing.returncode == 2 and f"path.run_id: no run {unknown}" in missing.stderr
    bad_filter = stack.cli(token, "runs", "list", "--status", "sleeping")
    assert bad_filter.returncode == 2 and "(422)" in bad_filter.stderr and "query.status" in bad_filter.stderr
    malformed = stack.cli(token, "runs", "stop", "OPS-1")
    assert malformed.returncode == 2 and "'OPS-1' is not a run id" in malformed.stderr
    no_run = stack.cli(token, "runs", "input", unknown, "hello")
    assert no_run.returncode == 2 and "(404)" in no_run.stderr
    usage = stack.cli(token, "runs")
    assert usage.returncode == 2 and "usage: ticketiq runs" in usage.stderr
    nobody = stack.cli(token, "--url", f"http://127.0.0.1:{free_port()}", "approvals", "list")
    assert nobody.returncode == 1 and "cannot reach the API at http://127.0.0.1:" in nobody.stderr


def test_version(tmp_path: Path) -> None:
    shown = preforked.run([sys.executable, "-m", "ticketiq.cli", "--version"], timeout=60,
                          env={**os.environ, "TICKETIQ_HOME": str(tmp_path)})  # fmt: skip
    from importlib.metadata import version

    assert shown.returncode == 0 and shown.stdout.strip() == f"ticketiq {version('ticketiq')}"


def test_the_dashboards_series_are_on_a_real_scrape(stack: Stack) -> None:
    """deploy/grafana/ticketiq.json groups each metric by labels; after real runs, a real scrape of the app
    carries those labels (tests/unit/test_grafana_dashboard.py checks the names against metrics.py)."""
    token = stack.token("operator")
    stack.until(token, stack.start(token, "triage", "Triage OPS-450: checkout fails"), ENDED)
    scraped = {f.name: f for f in text_string_to_metric_families(web.get(f"{stack.base}/metrics").text)}
    grouped = {
        "ticketiq_runs_started": {"agent", "channel"}, "ticketiq_runs_ended": {"agent", "channel", "status"},
        "ticketiq_step_seconds": {"agent", "le"}, "ticketiq_model_call_seconds": {"agent", "le"},
        "ticketiq_tool_call_seconds": {"tool", "class", "le"},
    }  # fmt: skip
    for name, labels in grouped.items():
        assert name in scraped, sorted(scraped)
        carried = {label for s in scraped[name].samples for label in s.labels}
        assert labels <= carried, (name, carried)
    triage = [s for s in scraped["ticketiq_tool_call_seconds"].samples if s.labels.get("tool") == "jira_add_comment"]
    assert triage and {s.labels["class"] for s in triage} == {"write"}
    for gauge in ("ticketiq_runs_waiting", "ticketiq_approvals_pending", "ticketiq_jobs_queued"):
        assert scraped[gauge].type == "gauge"
