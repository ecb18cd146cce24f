"""The kill trials' modes that take the suite's embedded Postgres away under the runs (LIYAGENT_KILL_MODE
`db` and `dbrestart`). The app processes run with the suite's home as their TICKETIQ_HOME: their URL names
that home's server, so they watch it (`ticketiq.dbserver.watch`). The server is shared with the rest of
the trial's rig (the stand-ins' records, the judge's connections, the suite's spare databases): each of
those reconnects once it is back, as in production.

- SIGKILL of its postmaster (`db`, and half of the `dbrestart` rounds): nobody starts it again but the app
  processes, one of which does, on the port the home keeps. Measured: the SIGKILL to the server answering.
- `ticketiq db stop`, then `ticketiq db url` (the other half of the `dbrestart` rounds), each with
  TICKETIQ_HOME and TICKETIQ_DATABASE_URL exported as a person running it by hand has them: the server is
  stopped on purpose, every process must see so and leave it stopped, and `db url` starts it again on the
  same port, printing the URL every process holds. Measured: `db stop` to the server answering again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.support import preforked
from tests.support.cluster import App
from ticketiq.dbserver import embedded

POSTGRES_MODES = ("db", "dbrestart")
BACK_WITHIN_S = 60.0  # the server answers again within this (generous: a loaded machine)
# Each process looks at the server every 0.25 s (watch.WATCH_EVERY_S) and says once that it found it
# stopped on purpose; this is the bound for all of them to have said so.
NOTICED_WITHIN_S = 15.0
STOPPED_ON_PURPOSE = "stopped on purpose"  # what a process logs when it finds the server so (watch.py)
KILL, STOP_AND_URL = "kill", "stop+url"


@dataclass
class Restarts:
    """The suite's embedded server in `home`, which the processes reach at `db_url`, taken away each round
    and back; what each way took."""

    home: Path
    db_url: str
    back_s: dict[str, list[float]] = field(default_factory=lambda: {KILL: [], STOP_AND_URL: []})
    ways: list[str] = field(default_factory=list)

    def kill(self, logs: Callable[[], str]) -> list[str]:
        """SIGKILL the postmaster; return once one of the processes started it again and it answers
        (nothing else starts it). A server back on another port is a problem: the URLs would be stale."""
        port = embedded.kept_port(self.home)
        killed = embedded.postmaster_pid(self.home)
        assert killed is not None, f"no embedded postgres runs in {self.home}"
        os.kill(killed, signal.SIGKILL)
        at = time.monotonic()
        self._answering(at, "nobody started the killed postgres again", logs)
        self._took(KILL, at)
        return self._same_port(killed, port)

    def stop_and_start(self, apps: Sequence[App], logs: Callable[[], str]) -> list[str]:
        """`ticketiq db stop`; once every process said it found the server stopped on purpose, nobody may
        have started it again; then `ticketiq db url` starts it on its port and prints the URL they hold."""
        port = embedded.kept_port(self.home)
        before = embedded.postmaster_pid(self.home)
        assert before is not None, f"no embedded postgres runs in {self.home}"
        read_from = {app.child.name: _size(app.child.log_path) for app in apps}
        problems: list[str] = []
        at = time.monotonic()
        stopped = self._cli("db", "stop")
        if (stopped.returncode, stopped.stdout.strip()) != (0, "stopped"):
            problems.append(f"`ticketiq db stop` exited {stopped.returncode}: {stopped.stdout.strip()} "
                            f"{stopped.stderr.strip()[-400:]}")  # fmt: skip
        deadline = time.monotonic() + NOTICED_WITHIN_S
        silent = [app for app in apps if STOPPED_ON_PURPOSE not in _since(app, read_from)]
        while silent and time.monotonic() < deadline:
            time.sleep(0.05)
            silent = [app for app in silent if STOPPED_ON_PURPOSE not in _since(app, read_from)]
        problems += [f"{app.child.name} did not say within {NOTICED_WITHIN_S:g} s that it found the server "
                     "stopped on purpose" for app in silent]  # fmt: skip
        again = embedded.postmaster_pid(self.home)
        if again is not None:
            problems.append(f"the server stopped on purpose was started again (pid {again}) before `db url`")
        started = self._cli("db", "url")
        if (started.returncode, started.stdout.strip()) != (0, self.db_url):
            problems.append(f"`ticketiq db url` exited {started.returncode} printing {started.stdout.strip()!r}, "
                            f"not the URL the processes hold: {started.stderr.strip()[-400:]}")  # fmt: skip
        self._answering(at, "`ticketiq db url` did not bring the stopped postgres back", logs)
        self._took(STOP_AND_URL, at)
        return problems + self._same_port(before, port)

    def spread(self, way: str) -> str:
        """The way's times so far, as text (so that the rounds' figures are not summed)."""
        ordered = sorted(self.back_s[way])
        if not ordered:
            return "none"
        what = "kills" if way == KILL else "stops"
        return f"median {ordered[len(ordered) // 2]:.2f} s, max {ordered[-1]:.2f} s over {len(ordered)} {what}"

    def extra(self, way: str) -> dict[str, Any]:
        """`dbrestart`'s figures: the round's way (each counted over the rounds), each way's times so far,
        and the ways round by round."""
        self.ways.append(way)
        return {
            "postmaster_sigkilled": way == KILL, "db_stop_then_db_url": way == STOP_AND_URL,
            "postgres_back_s": self.spread(KILL), "db_stop_to_answering_s": self.spread(STOP_AND_URL),
            "way_by_round": ", ".join(self.ways),
        }  # fmt: skip

    def _answering(self, since: float, what: str, logs: Callable[[], str]) -> None:
        while True:
            try:
                psycopg.connect(self.db_url, connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() - since > BACK_WITHIN_S:
                    raise AssertionError(f"{what} within {BACK_WITHIN_S:g} s:\n{logs()}") from None
                time.sleep(0.05)

    def _took(self, way: str, since: float) -> None:
        self.back_s[way].append(time.monotonic() - since)

    def _same_port(self, before: int | None, port: int | None) -> list[str]:
        now, kept = embedded.postmaster_pid(self.home), embedded.kept_port(self.home)
        if now in (None, before) or kept != port:
            return [f"postgres came back as pid {now} on port {kept}, not a new postmaster on port {port}"]
        return []

    def _cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The real CLI, as a person runs it by hand: the home, and the URL `ticketiq db url` printed."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
        env.update(TICKETIQ_HOME=str(self.home), TICKETIQ_DATABASE_URL=self.db_url)
        return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env=env, timeout=120)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _since(app: App, offsets: dict[str, int]) -> str:
    """What the process logged since the offset (its log file only grows)."""
    try:
        with open(app.child.log_path, "rb") as log:
            log.seek(offsets[app.child.name])
            return log.read().decode(errors="replace")
    except FileNotFoundError:
        return ""
