"""The kill trials' database modes (LIYAGENT_KILL_MODE `failover` and `stall`): the app processes run on
a pg_auto_failover formation (`ticketiq db ha up` in the trial's own home: a monitor, a primary and its
synchronous standby), and each round's event strikes the primary node while the round's runs, its source
sync and its workflow are in flight.

- `failover`: the primary node's whole tree (its pg_autoctl keeper, postmaster and backends) SIGKILLed,
  as its machine dying; the standby is promoted, every app process finds it through the multi-host URL.
  Measured: the kill to the first write the URL takes again (the outage). Between rounds the old node
  is brought back and the formation waits until commits are synchronous again (one copy meanwhile).
- `stall`: the primary node's tree SIGSTOPped (a frozen machine) past its health checks, until the
  monitor has promoted the standby and the URL takes writes there; then a write is sent to the frozen
  old primary's own port (the way an app that still had its address would), and the old primary is
  SIGCONTed. The old primary must acknowledge no write once the new one leads: the probe's write is
  never acknowledged (it waits for a standby that follows it no more, until its keeper demotes it), and
  the trials' own writes are judged from the database as in every mode.

The stand-ins keep their records in the suite's Postgres, not on the formation: a vendor does not fail
over with us. The judging statements read them through postgres_fdw (`standin` is a foreign schema in
the formation's app database), so every statement of the judge is the same in every mode.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psutil
import psycopg

from ticketiq.dbserver.formation import Formation, FormationError, down, up
from ticketiq.standins.records import SCHEMA

FORMATION_MODES = ("failover", "stall")
# Strike while the round's runs go (begun about 0.4 s after the victim is up, each about 2.2 s long).
STRIKE_WINDOW_S = (0.8, 2.2)
# A sync trial's searches answer this late here (0.1 s in the other modes): its 30 pages then take about
# as long as a run (2 s), so it spans the strike window as the runs do, and what it has left to do after
# the outage (about 10 s of it, the formation's own) fits the 15 s a recovery may take.
SYNC_SEARCH_STALL_S = 0.04
PRIMARY_WITHIN_S = 60.0  # a new primary takes writes within this (measured: about 10 s)
SYNCHRONOUS_WITHIN_S = 120.0  # the old node rejoined as the synchronous standby (measured: 2-4 s)
STALL_PAST_S = 2.0  # stall: the old primary stays frozen this long after the new one took a write
PROBE_WAIT_S = 4.0  # stall: how long the probe's write to the old primary is given to be acknowledged


@dataclass
class Struck:
    """One event on the formation, as measured."""

    node: str
    outage_s: float  # the kill (or the stop) to the first write the URL took again
    acknowledged_by_old: int = 0  # stall: writes the old primary acknowledged once the new one led
    probe: str = ""  # stall: what the probe's write came to


@dataclass
class FormationRig:
    """A formation in a home of its own outside pytest's temporary root (a pytest session started
    meanwhile deletes all but the newest few of those roots, and a running formation's folders with
    them); its logs are copied to `logs_to` when it goes down."""

    logs_to: Path
    home: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="ticketiq-ha-trials-")) / "home")
    url: str = ""
    struck: list[Struck] = field(default_factory=list)
    formation: Formation | None = None
    seen: dict[int, float] = field(default_factory=dict)  # every pid of it seen, with its start time

    def up(self) -> str:
        try:
            made = up(self.home)
        finally:
            with contextlib.suppress(FormationError):
                self.formation = Formation.load(self.home)
                self._remember()
        self.url = made.url
        return self.url

    def down(self) -> None:
        """Stop the formation and delete its data, its logs copied first; then any process of it still
        alive (one whose parent was killed under it) is SIGKILLed, by pid."""
        with contextlib.suppress(OSError):
            logs = self.home / "ha" / "logs"
            if logs.is_dir():
                shutil.copytree(logs, self.logs_to / "ha-logs", dirs_exist_ok=True)
        self._remember()
        try:
            down(self.home, purge=True)
        finally:
            for pid, started in self.seen.items():
                with contextlib.suppress(psutil.Error):
                    left = psutil.Process(pid)
                    if left.create_time() == started:
                        left.kill()
            shutil.rmtree(self.home.parent, ignore_errors=True)

    def _remember(self) -> None:
        if self.formation is None:
            return
        for name in ("monitor", "node1", "node2"):
            for pid in self.formation.pids(name):
                with contextlib.suppress(psutil.Error):
                    self.seen.setdefault(pid, psutil.Process(pid).create_time())

    def mirror_standins(self, standins_db_url: str) -> None:
        """The stand-ins' records, read in the formation's app database as the foreign schema `standin`."""
        parts = urlsplit(standins_db_url)
        options = {"host": parts.hostname or "127.0.0.1", "port": str(parts.port or 5432),
                   "dbname": parts.path.lstrip("/")}  # fmt: skip
        user = parts.username or "postgres"
        password = f", password '{parts.password}'" if parts.password else ""
        # The stand-ins make their schema at their first write; it is made now, so it can be imported.
        with psycopg.connect(standins_db_url, autocommit=True) as conn:
            conn.execute(SCHEMA.encode())
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS postgres_fdw")
            conn.execute("DROP SCHEMA IF EXISTS standin CASCADE")
            conn.execute("DROP SERVER IF EXISTS standins CASCADE")
            listed = ", ".join(f"{k} '{v}'" for k, v in options.items())
            conn.execute(f"CREATE SERVER standins FOREIGN DATA WRAPPER postgres_fdw OPTIONS ({listed})")
            conn.execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER standins OPTIONS (user '{user}'{password})")
            conn.execute("CREATE SCHEMA standin")
            conn.execute("IMPORT FOREIGN SCHEMA standin FROM SERVER standins INTO standin")

    # ----- the event ---------------------------------------------------------------------------------

    def strike(self, mode: str) -> Struck:
        """The mode's event on the node that is primary now; returns once the URL takes writes again. When
        no node takes writes in time, the monitor's last events and each node's state say why."""
        try:
            return self._strike(mode)
        except FormationError as exc:
            raise FormationError(f"{exc}\n{self.diagnosis()}") from exc

    def diagnosis(self) -> str:
        formation = self._formation()
        lines = []
        with contextlib.suppress(Exception):
            lines += [f"{n.name}: {n.to_json()}" for n in formation.nodes()]
        with contextlib.suppress(Exception), psycopg.connect(formation.monitor_url) as conn:
            events = conn.execute("SELECT eventtime, nodename, reportedstate, goalstate, description "
                                  "FROM pgautofailover.event ORDER BY eventid DESC LIMIT 25").fetchall()  # fmt: skip
            lines += [" | ".join(str(v) for v in e) for e in reversed(events)]
        return "\n".join(lines)

    def _strike(self, mode: str) -> Struck:
        formation = self._formation()
        self._remember()
        primary = formation.primary()
        if primary is None:
            raise FormationError("no primary to strike: the formation is not up")
        began = time.monotonic()
        if mode == "failover":
            formation.kill(primary.name)
            formation.wait_primary(PRIMARY_WITHIN_S)
            struck = Struck(primary.name, time.monotonic() - began)
        else:
            # Connected before the freeze, as an app's pooled connection is: its write reaches the frozen
            # server's socket, and is read when the server wakes.
            probe = OldPrimaryProbe(node_url(self.url, primary.port))
            probe.connect()
            began = time.monotonic()
            formation.stop(primary.name)
            try:
                formation.wait_primary(PRIMARY_WITHIN_S)
                struck = Struck(primary.name, time.monotonic() - began)
                time.sleep(STALL_PAST_S)
                probe.start()  # its write waits at the frozen server's socket
                time.sleep(0.2)
            finally:
                formation.cont(primary.name)
            struck.acknowledged_by_old, struck.probe = probe.outcome(PROBE_WAIT_S)
        self.struck.append(struck)
        return struck

    def back(self) -> float:
        """Between rounds: the struck node back as the synchronous standby; returns how long it took. When
        it does not come back, its log's last lines and the monitor's events say why."""
        formation = self._formation()
        began = time.monotonic()
        last = self.struck[-1] if self.struck else None
        if last is not None and formation.tree(last.node).keeper is None:
            formation.start(last.node)  # killed: its keeper is started again (a stopped one rejoins alone)
        try:
            formation.wait_synchronous(SYNCHRONOUS_WITHIN_S)
            self._remember()
        except FormationError as exc:
            tail = ""
            if last is not None:
                with contextlib.suppress(OSError):
                    tail = "\n".join(formation.layout.log(last.node).read_text(errors="replace").splitlines()[-40:])
            raise FormationError(f"{exc}\n{self.diagnosis()}\n--- {last.node if last else ''} log ---\n{tail}") from exc
        return time.monotonic() - began

    def outages(self) -> str:
        """The outage per try, as the result file keeps it (text, so the rounds' figures are not summed)."""
        return ", ".join(f"{s.outage_s:.1f}" for s in self.struck)

    def _formation(self) -> Formation:
        assert self.formation is not None, "the formation is not up"
        return self.formation


def node_url(url: str, port: int) -> str:
    """The one node at `port`, without target_session_attrs: what an app that kept its address reaches."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0] or "postgres"
    return f"postgresql://{userinfo}@127.0.0.1:{port}{parts.path}"


class OldPrimaryProbe:
    """A write sent to the old primary's own port while it is frozen, answered (or not) once it is
    woken. It must never be acknowledged. Past its wait the connection's socket is shut down under it,
    never cancelled: Postgres reports a commit whose wait for the standby was cancelled as committed."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.result: dict[str, Any] = {}
        self.conn: psycopg.Connection[Any] | None = None
        self.thread = threading.Thread(target=self._write, name="old-primary-probe", daemon=True)

    def connect(self) -> None:
        self.conn = psycopg.connect(self.url, autocommit=True, connect_timeout=10)
        self.conn.execute("CREATE TABLE IF NOT EXISTS trial_probe (at timestamptz DEFAULT now())")

    def start(self) -> None:
        self.thread.start()

    def _write(self) -> None:
        try:
            assert self.conn is not None
            self.conn.execute("INSERT INTO trial_probe DEFAULT VALUES")
            self.result["acknowledged"] = True
        except Exception as exc:  # refused, read-only, demoted, or cut: not acknowledged
            self.result["error"] = f"{type(exc).__name__}: {str(exc).strip()[:160]}"
        finally:
            if self.conn is not None:
                self.conn.close()

    def outcome(self, wait_s: float) -> tuple[int, str]:
        self.thread.join(wait_s)
        if self.thread.is_alive():
            conn = self.conn
            if conn is not None and not conn.closed:
                with contextlib.suppress(OSError), socket.socket(fileno=os.dup(conn.pgconn.socket)) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            self.thread.join(15)
            if self.thread.is_alive():
                return 0, "no answer, and the cut did not end the wait"
            if not self.result.get("acknowledged"):
                return 0, f"not acknowledged within {wait_s:g} s (cut)"
        if self.result.get("acknowledged"):
            return 1, "the old primary acknowledged a write after the new one led"
        return 0, str(self.result.get("error", "not acknowledged"))
