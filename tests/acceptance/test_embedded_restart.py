"""The embedded Postgres outlives its own restarts, with real `ticketiq serve` processes and stand-ins on
the embedded server of a temporary TICKETIQ_HOME (not the suite's Postgres).

SIGKILLed, its postmaster is started again by one of the processes that use it (under a lock in the
home), on the port the home keeps, and every run in flight goes on: each succeeds and each of its
writes is applied once. Stopped on purpose (`ticketiq db stop`), it stays stopped: the processes wait
(`/readyz` 503) until `ticketiq db url` starts it again, on the same port, and then go on.

Every wait has a generous deadline and nothing is timed: the machine is shared.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from tests.support import preforked
from tests.support.cluster import App, Cluster
from tests.support.http import web
from ticketiq.dbserver import embedded

TRIAGE = "Triage OPS-{n}: checkout is failing"
AGENT_THREAD = "19:ops@thread.tacv2;messageid=1700000000000"  # where triage's teams_reply goes
BACK_WITHIN_S = 180.0  # generous: a loaded 2-core machine; nothing here is a timed assertion
MODEL_LATENCY_MS = 1500  # triage's four steps span about 6 s: the kill lands while every run is going


@dataclass
class Home:
    path: Path
    cluster: Cluster

    def cli(self, *args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
        """The real CLI on this home; `url`: with TICKETIQ_DATABASE_URL exported too, as docs/operate.md's
        "The demo, run by hand" has it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
        env["TICKETIQ_HOME"] = str(self.path)
        if url is not None:
            env["TICKETIQ_DATABASE_URL"] = url
        return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env=env, timeout=180)

    def postmaster(self) -> int | None:
        """The pid postmaster.pid names, if the file is there."""
        lines = self._pidfile()
        return int(lines[0]) if lines else None

    def port(self) -> int | None:
        """The port postmaster.pid names, once the server wrote it."""
        lines = self._pidfile()
        return int(lines[3]) if len(lines) > 3 else None

    def _pidfile(self) -> list[str]:
        try:
            return (self.path / "pg" / "postmaster.pid").read_text().splitlines()
        except FileNotFoundError:
            return []


def url_port(url: str) -> int:
    return int(str(conninfo_to_dict(url)["port"]))


@pytest.fixture
def home() -> Iterator[Home]:
    """The embedded server of a temporary home, started by the real `ticketiq db url`, with the
    stand-ins on its URL; the apps each test starts. Everything is stopped at the end, even on failure.
    The folder is outside pytest's temporary root, whose mode pytest narrows at each session start."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-restart-") as folder:
        tmp = Path(folder)
        path = tmp / "home"  # the home Cluster gives every process it starts
        try:
            env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
            made = preforked.run([sys.executable, "-m", "ticketiq.cli", "db", "url"],
                                 env={**env, "TICKETIQ_HOME": str(path)}, timeout=180)  # fmt: skip
            assert made.returncode == 0, made.stderr
            cluster = Cluster(made.stdout.strip(), tmp, standin_args=("--model-latency-ms", str(MODEL_LATENCY_MS)))
            try:
                yield Home(path, cluster.start())
            finally:
                cluster.stop()
        finally:
            embedded.stop(path)  # whoever started it last (`ticketiq db url`, or a process after the kill)


def app_on_home(home: Home, name: str, *, by_url: bool) -> App:
    """An app process on the home's server: `by_url` names it by TICKETIQ_DATABASE_URL (the URL `ticketiq
    db url` printed); otherwise TICKETIQ_DATABASE_URL is unset and the process finds it in its home."""
    env = {} if by_url else {"TICKETIQ_DATABASE_URL": ""}  # empty is unset
    return home.cluster.app(name, env=env, lead=True)


def run_of(app: App, cluster: Cluster, run_id: str) -> dict[str, Any] | None:
    """The run as `GET /v1/runs/{id}` shows it, or None while the process cannot answer."""
    try:
        response = web.get(f"{app.base}/v1/runs/{run_id}", headers=cluster.auth, timeout=10)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    shown: dict[str, Any] = response.json()
    return shown


def ready(app: App) -> bool:
    try:
        return web.get(f"{app.base}/readyz", timeout=10).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(check: Any, what: str, cluster: Cluster, within_s: float = BACK_WITHIN_S) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within_s:g} s; logs:\n{cluster.logs()}")
        time.sleep(0.2)


def runs_ended(app: App, cluster: Cluster, runs: dict[int, str]) -> dict[int, dict[str, Any]]:
    """Each run as the API shows it once it ended (succeeded, failed, interrupted), by ticket."""
    shown: dict[int, dict[str, Any]] = {}

    def every_run_ended() -> bool:
        for n, run_id in runs.items():
            run = run_of(app, cluster, run_id)
            if run is not None and run["status"] in ("succeeded", "failed", "interrupted"):
                shown[n] = run
        return len(shown) == len(runs)

    wait_for(every_run_ended, "every run ending", cluster)
    return shown


def applied_writes(cluster: Cluster) -> list[dict[str, Any]]:
    return [w for w in cluster.writes() if w["effect"] == "applied"]


def each_write_once(cluster: Cluster, tickets: list[int]) -> None:
    """Per ticket: one incident, one Jira comment, one ops-thread reply, from the stand-ins' records."""
    writes = applied_writes(cluster)
    for n in tickets:
        incidents = [w for w in writes if w["vendor"] == "incidentio" and f"OPS-{n}:" in str(w["body"])]
        comments = [w for w in writes if w["vendor"] == "jira" and w["target"] == f"OPS-{n}"]
        replies = [w for w in writes if w["vendor"] == "teams" and w["target"] == AGENT_THREAD
                   and f"Triaged OPS-{n}:" in str(w["body"])]  # fmt: skip
        assert (len(incidents), len(comments), len(replies)) == (1, 1, 1), (n, incidents, comments, replies)


def test_a_sigkilled_embedded_postmaster_is_started_again_on_its_port_and_every_run_succeeds_writing_once(
    home: Home,
) -> None:
    cluster = home.cluster
    first = app_on_home(home, "first", by_url=False)
    second = app_on_home(home, "second", by_url=True)
    port = url_port(cluster.db_url)
    tickets = list(range(1301, 1307))
    runs = {n: cluster.post_run(first if n % 2 else second, "triage", TRIAGE.format(n=n)) for n in tickets}
    # Every run has answered its first step (and holds its checkpoint) before the kill.
    wait_for(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), "every run's first step", cluster)
    going = [n for n, r in runs.items() if cluster.run(r)["status"] == "running"]
    killed = home.postmaster()
    assert killed is not None
    os.kill(killed, signal.SIGKILL)

    # Started again by one of the processes, on the port the home keeps (the URL everyone holds).
    wait_for(lambda: home.postmaster() not in (None, killed) and ready(first) and ready(second),
             "the server back and both processes ready", cluster)  # fmt: skip
    assert home.port() == port
    # Every run ends, succeeded, as the API shows it; each write was applied once.
    shown = runs_ended(first, cluster, runs)
    assert {n: run["status"] for n, run in shown.items()} == dict.fromkeys(tickets, "succeeded"), cluster.logs()
    assert going, "no run was in flight at the kill: the test showed nothing"
    each_write_once(cluster, tickets)
    # One process started it again; the other found it started (the lock in the home).
    logs = [app.child.log_tail(400_000) for app in (first, second)]
    logs.append(cluster.standins.log_tail(400_000) if cluster.standins else "")
    assert sum(log.count("started it again on port") for log in logs) == 1, cluster.logs()


def test_a_server_stopped_with_db_stop_stays_stopped_until_db_url_starts_it_on_the_same_port(home: Home) -> None:
    cluster = home.cluster
    first = app_on_home(home, "first", by_url=False)
    second = app_on_home(home, "second", by_url=True)
    port = url_port(cluster.db_url)

    stopped = home.cli("db", "stop")
    assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped"), stopped.stderr
    # Each process sees it was stopped on purpose and leaves it so: it says so, and waits (503).
    wait_for(lambda: all("stopped on purpose" in app.child.log_tail(400_000) for app in (first, second)),
             "both processes seeing the server stopped on purpose", cluster)  # fmt: skip
    assert home.postmaster() is None
    for app in (first, second):
        answer = web.get(f"{app.base}/readyz", timeout=10)
        assert answer.status_code == 503, answer.text

    started = home.cli("db", "url")
    assert started.returncode == 0, started.stderr
    assert url_port(started.stdout.strip()) == port  # the same port: the URL everyone holds still works
    wait_for(lambda: ready(first) and ready(second), "both processes ready again", cluster)
    run_id = cluster.post_run(second, "triage", TRIAGE.format(n=1401))
    wait_for(lambda: (run_of(first, cluster, run_id) or {}).get("status") == "succeeded", "the run after", cluster)
    each_write_once(cluster, [1401])


def test_db_stop_then_db_url_with_the_url_exported_starts_it_again_and_every_run_in_flight_succeeds_once(
    home: Home,
) -> None:
    # As docs/operate.md runs it by hand: TICKETIQ_DATABASE_URL exported, the URL `ticketiq db url` printed.
    # `db url` used to print that variable and start nothing, and no run in flight ever finished.
    cluster = home.cluster
    first = app_on_home(home, "first", by_url=True)
    second = app_on_home(home, "second", by_url=True)
    port = url_port(cluster.db_url)
    tickets = list(range(1501, 1507))
    runs = {n: cluster.post_run(first if n % 2 else second, "triage", TRIAGE.format(n=n)) for n in tickets}
    wait_for(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), "every run's first step", cluster)
    going = [n for n, r in runs.items() if cluster.run(r)["status"] == "running"]

    stopped = home.cli("db", "stop", url=cluster.db_url)
    assert (stopped.returncode, stopped.stdout.strip()) == (0, "stopped"), stopped.stderr
    wait_for(lambda: all("stopped on purpose" in app.child.log_tail(400_000) for app in (first, second)),
             "both processes seeing the server stopped on purpose", cluster)  # fmt: skip
    for app in (first, second):
        assert web.get(f"{app.base}/readyz", timeout=10).status_code == 503  # the database is away

    started = home.cli("db", "url", url=cluster.db_url)
    assert (started.returncode, started.stdout.strip()) == (0, cluster.db_url), started.stderr
    assert home.port() == port  # started again on the port every process holds
    wait_for(lambda: ready(first) and ready(second), "both processes ready again", cluster)
    shown = runs_ended(first, cluster, runs)
    assert {n: run["status"] for n, run in shown.items()} == dict.fromkeys(tickets, "succeeded"), cluster.logs()
    assert going, "no run was in flight at the stop: the test showed nothing"
    each_write_once(cluster, tickets)


def test_db_url_names_another_database_as_it_is_and_starts_nothing(home: Home) -> None:
    other = "postgresql://someone@db.example.com:5432/elsewhere"
    before = home.postmaster()
    shown = home.cli("db", "url", url=other)
    assert (shown.returncode, shown.stdout.strip()) == (0, other), shown.stderr
    assert home.postmaster() == before
