"""`ticketiq db ha` for real: the CLI makes a pg_auto_failover formation in a temporary TICKETIQ_HOME, a
row is written through the URL it prints, the primary node's whole tree is SIGKILLed through the
formation's API, and the same URL takes writes again on the promoted standby with the row there. Status
says ONE COPY until the old node is brought back, synchronous again after; `down` leaves no process of
the formation running. The outage (the SIGKILL to the first write that commits) is printed.

Needs pg_auto_failover (`make pg-auto-failover`, which `make test` runs); skipped without it when not
root, since only root (or sudo) can install it. About 30 s.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
import pytest

from tests.support import preforked
from ticketiq.dbserver.authentication import without_password
from ticketiq.dbserver.formation import Formation
from ticketiq.dbserver.formation.plan import HBA_TEXT, monitor_url, multi_host_url, node_url

INSTALLED = shutil.which("pg_autoctl") is not None or os.access("/usr/bin/pg_autoctl", os.X_OK)
pytestmark = pytest.mark.skipif(
    not INSTALLED and os.geteuid() != 0,
    reason="pg_auto_failover is not installed and this is not root: `make pg-auto-failover` installs it (as root, "
    "or with sudo)",
)
URL = re.compile(
    r"postgresql://postgres:([A-Za-z0-9_-]{40,})@127\.0\.0\.1:(\d+),127\.0\.0\.1:(\d+)/ticketiq"
    r"\?target_session_attrs=read-write"
)
WRITE_WITHIN_S = 30.0
# What initdb --auth=trust left in every server's pg_hba.conf (what counts of it), before passwords.
TRUSTING_HBA = "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"


@dataclass
class Home:
    """A TICKETIQ_HOME for the formation, and every pid of it any status showed (for the checks and the
    clean-up)."""

    path: Path
    seen: dict[int, float] = field(default_factory=dict)  # pid -> its start time, so a reused pid is left be

    def cli(self, *args: str, timeout_s: float = 180) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "TICKETIQ_DATABASE_URL"}
        env["TICKETIQ_HOME"] = str(self.path)
        return preforked.run([sys.executable, "-m", "ticketiq.cli", "db", "ha", *args], env=env, timeout=timeout_s)

    def status(self) -> dict[str, Any]:
        done = self.cli("status", "--json", timeout_s=30)
        assert done.returncode in (0, 1), done.stdout + done.stderr  # up, or not up; anything else is a crash
        shown: dict[str, Any] = json.loads(done.stdout)
        for part in [shown.get("monitor"), *shown.get("nodes", [])]:
            for pid in part["pids"] if part else []:
                with contextlib.suppress(psutil.Error):
                    self.seen.setdefault(pid, psutil.Process(pid).create_time())
        return shown


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    """A home outside pytest's temporary root: a pytest session started meanwhile (another worker's, another
    checkout's) deletes all but the newest few of those roots, and the servers' folders with them. Runs
    `down --purge` whatever happened, then SIGKILLs any process of the formation still alive."""
    made = Home(Path(tempfile.mkdtemp(prefix="ticketiq-ha-test-")) / "home")
    try:
        yield made
    finally:
        if (made.path / "ha" / "formation.json").exists():
            with contextlib.suppress(AssertionError):
                made.status()
        logs = made.path / "ha" / "logs"
        if logs.exists():  # pg_autoctl's logs outlive the purge, in the test's temporary folder
            shutil.copytree(logs, tmp_path / "ha-logs")
        gone = made.cli("down", "--purge", timeout_s=120)
        leftovers: list[int] = []
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                started = made.seen.get(proc.pid) == proc.create_time()
                # pg_autoctl and Postgres carry the formation's folder in their environment.
                ours = started or proc.environ().get("XDG_RUNTIME_DIR", "").startswith(str(made.path))
                if ours and proc.status() != psutil.STATUS_ZOMBIE:
                    proc.kill()
                    leftovers.append(proc.pid)
        shutil.rmtree(made.path.parent, ignore_errors=True)
        assert gone.returncode == 0, gone.stdout + gone.stderr
        assert not leftovers, f"down --purge left pids {leftovers} running (SIGKILLed now)"


def shut_out(home: Home, url: str) -> None:
    """Every server of the formation asks for its password over TCP (on a node, the app's URL without it is
    refused, and so is pg_autoctl's health-check role, whose password is public; the monitor refuses its
    own role without the password), keeps it in a passfile only its user reads, and its sockets (where it
    trusts) are in a folder only that user reaches."""
    layout = Formation.load(home.path).layout
    assert stat.S_IMODE(layout.passfile.stat().st_mode) == 0o600
    assert stat.S_IMODE(layout.sockets.stat().st_mode) == 0o700
    for name in ("monitor", "node1", "node2"):
        assert (layout.pgdata(name) / "pg_hba.conf").read_text().startswith(HBA_TEXT)
    plan = Formation.load(home.path).plan
    for port in plan.node_ports.values():
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            psycopg.connect(node_url(port, None), passfile="/nonexistent/.pgpass", connect_timeout=5).close()
        with pytest.raises(psycopg.OperationalError, match="rejects connection"):
            psycopg.connect(f"postgresql://pgautofailover_monitor:pgautofailover_monitor@127.0.0.1:{port}/ticketiq",
                            connect_timeout=5).close()  # fmt: skip
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(monitor_url(plan.monitor_port), passfile="/nonexistent/.pgpass", connect_timeout=5).close()
    if os.geteuid() == 0:  # root can be another user; the formation runs as ticketiq-pg
        psql = Formation.load(home.path).bin_dir / "psql"
        for target in (node_url(plan.node_ports["node1"], None), f"host={layout.sockets} port={plan.monitor_port} "
                       "dbname=postgres user=ticketiq-pg"):  # fmt: skip
            env = {"PATH": "/usr/sbin:/usr/bin:/bin", "PGPASSFILE": "/nonexistent/.pgpass"}
            tried = subprocess.run(["runuser", "-u", "nobody", "--", str(psql), "-w", "-X", "-d", target, "-c",
                                    "SELECT 1"], env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
            assert tried.returncode != 0, tried.stdout
            assert "no password supplied" in tried.stderr or "Permission denied" in tried.stderr, tried.stderr


def as_made_before_passwords(formation: Formation) -> None:
    """The formation as a release before passwords left it: no passfile, its roles without a password,
    every pg_hba.conf trusting 127.0.0.1 (as initdb --auth=trust wrote it), reloaded."""
    layout, plan = formation.layout, formation.plan
    primary = formation.primary()
    assert primary is not None
    roles = {plan.monitor_port: ("autoctl_node",), primary.port: ("postgres", "pgautofailover_replicator")}
    for port, names in roles.items():
        with psycopg.connect(host=str(layout.sockets), port=port, user=formation.run_as.user,
                             dbname="postgres", autocommit=True) as conn:  # fmt: skip
            conn.execute("SET synchronous_commit = remote_apply")
            for role in names:
                conn.execute(f"ALTER ROLE {role} PASSWORD NULL")
    for name, port in plan.ports.items():
        hba = layout.pgdata(name) / "pg_hba.conf"
        owner = hba.stat()
        hba.write_text(TRUSTING_HBA)
        os.chown(hba, owner.st_uid, owner.st_gid)
        with psycopg.connect(host=str(layout.sockets), port=port, user=formation.run_as.user,
                             dbname="postgres", autocommit=True) as conn:  # fmt: skip
            conn.execute("SELECT pg_reload_conf()")
    layout.passfile.unlink()


def write(url: str, mark: str) -> int:
    """Insert a row through the URL; the port of the node that took it."""
    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS ha_probe (mark text PRIMARY KEY)")
        conn.execute("INSERT INTO ha_probe (mark) VALUES (%s)", (mark,))
        return int(conn.info.port)


def marks(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True, connect_timeout=2) as conn:
        return {row[0] for row in conn.execute("SELECT mark FROM ha_probe").fetchall()}


def wait_for(home: Home, synchrony: str, within_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + within_s
    while True:
        shown = home.status()
        if shown.get("synchrony") == synchrony or time.monotonic() > deadline:
            return shown
        time.sleep(0.3)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.long
def test_the_formation_fails_over_loses_nothing_and_comes_back_synchronous(home: Home) -> None:
    made = home.cli("up")
    assert made.returncode == 0, made.stdout + made.stderr
    url = made.stdout.splitlines()[-1]
    printed = URL.fullmatch(url)
    assert printed, made.stdout
    secret = printed.group(1)
    assert secret not in "\n".join(made.stdout.splitlines()[:-1])  # on the last line only, printed on purpose
    shut_out(home, url)
    took = re.search(r"formation up in \d+\.\d s", made.stdout)
    assert took, made.stdout
    print(f"\n{took.group(0)}")

    again = home.cli("up")
    assert again.returncode == 0 and "up already" in again.stdout and again.stdout.splitlines()[-1] == url

    shown = home.status()
    assert shown["synchrony"] == "synchronous", shown
    assert sorted((n["reported"], n["assigned"]) for n in shown["nodes"]) == [("primary", "primary"),
                                                                              ("secondary", "secondary")]  # fmt: skip
    assert shown["url"] == without_password(url)

    first_port = write(url, "before")
    formation = Formation.load(home.path)
    primary = formation.primary()
    assert primary is not None and primary.port == first_port

    killed = formation.kill(primary.name)
    struck = time.monotonic()
    assert primary.keeper_pid in killed and primary.postmaster_pid in killed
    assert not [pid for pid in killed if alive(pid)]
    while True:
        try:
            second_port = write(url, "after")
            break
        except psycopg.OperationalError:
            assert time.monotonic() - struck < WRITE_WITHIN_S, f"no write through {url} within {WRITE_WITHIN_S:g} s"
            time.sleep(0.05)
    outage = time.monotonic() - struck
    print(f"failover outage: {outage:.2f} s (SIGKILL of {primary.name}'s tree to the first committed write)")
    assert second_port != first_port
    assert marks(url) == {"before", "after"}

    alone = wait_for(home, "one_copy", 15)
    assert alone["synchrony"] == "one_copy", alone
    assert alone["message"].startswith("ONE COPY")
    text = home.cli("status")
    assert text.returncode == 0 and "ONE COPY: commits are acknowledged by the primary alone" in text.stdout
    assert secret not in text.stdout + json.dumps(alone)

    back_at = time.monotonic()
    formation.restart(primary.name, timeout_s=60)
    print(f"{primary.name} back as the synchronous standby in {time.monotonic() - back_at:.1f} s")
    together = home.status()
    assert together["synchrony"] == "synchronous", together
    assert together["standby"] == primary.name
    assert marks(url) == {"before", "after"}

    # A formation made before passwords (every server trusting, no passfile) is moved to a new password by
    # the `up` after its `down`, with its rows.
    as_made_before_passwords(formation)
    assert marks(multi_host_url(formation.plan.node_ports.values(), None)) == {"before", "after"}  # anyone's
    assert home.cli("down").returncode == 0
    moved = home.cli("up")
    assert moved.returncode == 0 and "giving every role the formation's password" in moved.stdout, moved.stdout
    new_url = moved.stdout.splitlines()[-1]
    assert URL.fullmatch(new_url) and new_url != url
    shut_out(home, new_url)
    assert marks(new_url) == {"before", "after"}

    stopped = home.cli("down")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert home.seen and not [pid for pid in home.seen if alive(pid)]
    assert home.cli("status").returncode == 1
