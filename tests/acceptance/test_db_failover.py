"""The engine on a database that fails over: two `ticketiq serve` processes on a pg_auto_failover
formation (`ticketiq db ha up`: a monitor, a primary, its synchronous standby), the primary node's whole
tree SIGKILLed while runs are in flight. Every run finishes on the new primary with each vendor write
once; `/readyz` answers within a second throughout, 503 while no primary takes writes; each process
takes its liveness mark again under its own identity (none is found dead for the failover alone); the
processes view says one copy until the old node is back as the synchronous standby.

Needs Debian's pg_auto_failover (`make pg-auto-failover`; `make test` installs it).
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.acceptance.test_crash_resume import applied
from tests.support.cluster import App, Cluster
from tests.support.http import TLS, web
from tests.support.trial_formation import FormationRig
from ticketiq.entries.probes import READY_WITHIN_S

pytestmark = pytest.mark.skipif(
    shutil.which("pg_autoctl") is None and os.geteuid() != 0,
    reason="pg_auto_failover is not installed: `make pg-auto-failover` (as root) installs it",
)
TICKETS = (1801, 1802, 1803, 1804)


@pytest.fixture
def formation(tmp_path: Path) -> Iterator[FormationRig]:
    made = FormationRig(tmp_path)
    try:
        made.up()
        yield made
    finally:
        made.down()


class ReadyWatch:
    """Every app's /readyz asked every 0.1 s from a thread: each answer's status and how long it took."""

    def __init__(self, apps: list[App]) -> None:
        self.apps = apps
        self.seen: list[tuple[str, int, float]] = []  # (app, status, seconds)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="readyz-watch", daemon=True)

    def __enter__(self) -> ReadyWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(10)

    def _watch(self) -> None:
        with httpx.Client(verify=TLS, timeout=5.0) as client:
            while not self.stopping.is_set():
                for app in self.apps:
                    began = time.monotonic()
                    try:
                        status = client.get(f"{app.base}/readyz").status_code
                    except httpx.HTTPError:
                        status = 0
                    self.seen.append((app.child.name, status, time.monotonic() - began))
                time.sleep(0.1)


def database_view(cluster: Cluster, app: App) -> dict[str, Any]:
    response = web.get(f"{app.base}/v1/processes", headers=cluster.auth, timeout=10)
    response.raise_for_status()
    view: dict[str, Any] = response.json()["database"]
    return view


@pytest.mark.long
def test_runs_in_flight_when_the_primary_dies_finish_on_the_new_one_with_each_write_once(
    formation: FormationRig, db_url: str, tmp_path: Path
) -> None:
    # The stand-ins keep their records in the suite's Postgres: a vendor does not fail over with us.
    cluster = Cluster(formation.url, tmp_path, standin_args=("--model-latency-ms", "700"), standins_db_url=db_url)
    try:
        cluster.start()
        apps = [cluster.app("app1", lead=True, db_connect_timeout_s=2),
                cluster.app("app2", lead=False, db_connect_timeout_s=2)]  # fmt: skip
        identities = {web.get(f"{a.base}/readyz", timeout=10).json()["process"] for a in apps}
        assert database_view(cluster, apps[0])["copies"] == 2  # a commit is on both nodes
        runs = {n: cluster.post_run(apps[i % 2], "triage", f"Triage OPS-{n}: the primary dies")
                for i, n in enumerate(TICKETS)}  # fmt: skip
        cluster.wait_until(lambda: all(cluster.run(r)["step"] >= 1 for r in runs.values()), 30, "every first step")
        with ReadyWatch(apps) as ready:
            struck = formation.strike("failover")
            ended = {n: cluster.wait_run(r, timeout_s=90) for n, r in runs.items()}
        assert {n: r["status"] for n, r in ended.items()} == dict.fromkeys(TICKETS, "succeeded"), cluster.logs()
        for n in TICKETS:  # each write once: one incident, one comment, one reply per ticket
            assert len([w for w in applied(cluster.writes(vendor="incidentio")) if f"OPS-{n}" in str(w["body"])]) == 1
            assert len(applied(cluster.writes(vendor="jira", target=f"OPS-{n}"))) == 1
            assert len([w for w in applied(cluster.writes(vendor="teams")) if f"OPS-{n}" in str(w["body"])]) == 1
        # /readyz: every answer within its bound (a second, probes.READY_WITHIN_S: never the client's 5 s), 503 while
        # there was no primary, 200 again after. Seen from here, an answer cut at the bound also carries its
        # request's own time on a busy machine (1.004 to 1.011 s seen): half a second of margin for that.
        bound = READY_WITHIN_S + 0.5
        assert ready.seen and max(took for _, _, took in ready.seen) < bound, sorted(t for *_, t in ready.seen)[-5:]
        assert any(status == 503 for _, status, _ in ready.seen)
        assert {name for name, status, _ in ready.seen[-4:] if status == 200} == {"app1", "app2"}
        # Each process took its mark again as itself: no process was found dead for the failover.
        found_dead = cluster.rows("SELECT id FROM processes WHERE ended_how = 'died'")
        assert found_dead == []
        alive = cluster.rows("SELECT id FROM processes WHERE ended_at IS NULL AND process_alive(id)")
        assert {r["id"] for r in alive} == identities
        # One copy until the old node is back as the synchronous standby.
        view = database_view(cluster, apps[1])
        assert (view["copies"], view["says"].startswith("ONE COPY")) == (1, True)
        formation.back()
        cluster.wait_until(lambda: database_view(cluster, apps[0])["copies"] == 2, 30, "two copies again")
        assert struck.outage_s < 30.0
    finally:
        cluster.stop()
