"""`ticketiq cluster --db ha`: the stand-ins, two app processes and HAProxy on the pg_auto_failover
formation of TICKETIQ_HOME, brought up first; both processes answer through the edge on the formation's
multi-host URL; Ctrl-C stops what the cluster started and leaves the formation running (a database
outlives its app processes), which `ticketiq db ha down` then stops.

Needs pg_auto_failover (`make pg-auto-failover`; `make test` installs it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.cluster_process import cli, end_leftover, gone, pids, read_until
from tests.support.http import web
from ticketiq.dbserver.authentication import password_of, without_password
from ticketiq.dbserver.formation import Formation, FormationError, down
from ticketiq.operate.launch import free_port

pytestmark = pytest.mark.skipif(
    shutil.which("pg_autoctl") is None and os.geteuid() != 0,
    reason="pg_auto_failover is not installed: `make pg-auto-failover` (as root) installs it",
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A TICKETIQ_HOME outside pytest's temporary root (a pytest session started meanwhile deletes all but
    the newest few of those roots, a running formation's folders with them); the formation in it is
    stopped and deleted at the end, and any process of it still alive is SIGKILLed."""
    made = Path(tempfile.mkdtemp(prefix="ticketiq-cluster-ha-")) / "home"
    seen: dict[int, float] = {}
    try:
        yield made
    finally:
        with contextlib.suppress(FormationError):
            formation = Formation.load(made)
            for name in ("monitor", "node1", "node2"):
                for pid in formation.pids(name):
                    with contextlib.suppress(psutil.Error):
                        seen[pid] = psutil.Process(pid).create_time()
        with contextlib.suppress(FormationError):
            down(made, purge=True)
        for pid, started in seen.items():
            with contextlib.suppress(psutil.Error):
                left = psutil.Process(pid)
                if left.create_time() == started:
                    left.kill()
        shutil.rmtree(made.parent, ignore_errors=True)


@pytest.mark.long
def test_cluster_on_the_formation_serves_through_the_edge_and_leaves_the_formation_running(
    home: Path, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    env |= {"TICKETIQ_HOME": str(home), "TMPDIR": str(tmp_path)}
    port = free_port()
    proc = subprocess.Popen(cli("cluster", "--processes", "2", "--port", str(port), "--db", "ha"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)  # fmt: skip
    lines: list[str] = []
    try:
        read_until(proc, lines, "running;", 240)
        started = pids(lines)
        assert {"stand-ins", "app1", "app2", "edge"} <= set(started), lines
        url = Formation.load(home).url
        assert "target_session_attrs=read-write" in url and url.count("127.0.0.1:") == 2
        # The apps' database is the formation's URL, shown without its password.
        assert any(without_password(url) in line for line in lines), lines
        secret = password_of(url)
        assert secret is not None and secret not in "".join(lines)
        answered: set[Any] = set()
        for _ in range(6):
            response = web.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            assert response.status_code == 200, response.text
            answered.add(response.json()["process"])
        assert len(answered) == 2, answered
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, "".join(lines)
        assert proc.stdout is not None
        lines.extend(proc.stdout)
        apps = {name: pid for name, pid in started.items() if name in ("stand-ins", "app1", "app2", "edge")}
        assert [name for name, pid in apps.items() if not gone(pid)] == []
        # The formation outlives the cluster: still up, its primary taking writes.
        status = Formation.load(home).status()
        assert status.up and status.verdict is not None and status.verdict.primary is not None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        for pid in pids(lines).values():
            end_leftover(pid)
