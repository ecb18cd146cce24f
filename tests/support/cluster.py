"""Real `ticketiq serve` processes and the stand-ins as subprocesses over one Postgres, for crash
tests: start them, kill them (SIGKILL, SIGSTOP) by pid, and judge from the database and the stand-ins'
records. The cluster makes an admin token once, with the real `ticketiq tokens create`, and sends it
with every request to the API."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.support import preforked
from tests.support.engine import TEST_POOL_MIN
from tests.support.http import web
from ticketiq.operate.launch import Child, start_serve, start_standins
from ticketiq.standins.server import settings_env

TERMINAL = ("succeeded", "failed", "interrupted", "stopped")
# What every app process of a test runs with, beside its database and home.
BASE_SETTINGS = {"TICKETIQ_SEAL_KEYS": "crash:crash-test-secret", "TICKETIQ_LOG_LEVEL": "INFO",
                 "TICKETIQ_DB_POOL_MIN": str(TEST_POOL_MIN)}  # fmt: skip


@dataclass
class App:
    child: Child
    base: str

    @property
    def pid(self) -> int:
        return self.child.pid


@dataclass
class Cluster:
    db_url: str
    tmp: Path
    standin_args: tuple[str, ...] = ()
    standins_db_url: str | None = None  # where the stand-ins keep their records, when not beside the app's
    standins: Child | None = None
    standins_base: str = ""  # stand-ins another process started (attach), else those start() started
    apps: list[App] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    token: str = ""
    # Settings every process it starts runs with, the stand-ins and `ticketiq tokens create` too (e.g.
    # TICKETIQ_LOG_FORMAT), on top of BASE_SETTINGS.
    every_process: dict[str, str] = field(default_factory=dict)
    _kept: threading.local = field(default_factory=threading.local, repr=False)
    _opened: list[psycopg.Connection[dict[str, Any]]] = field(default_factory=list, repr=False)
    _closed: bool = False

    def start(self) -> Cluster:
        base = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
        base.update({"TICKETIQ_DATABASE_URL": self.db_url, "TICKETIQ_HOME": str(self.tmp / "home"), **BASE_SETTINGS,
                     **self.every_process})  # fmt: skip
        self.token = create_token(base, "cluster-admin", "admin")
        standins_env = {**base, "TICKETIQ_DATABASE_URL": self.standins_db_url or self.db_url}
        self.standins = start_standins(standins_env, self.tmp, *self.standin_args)
        # The stand-ins print their settings, their database's URL among them: the apps keep theirs.
        self.env = {**base, **self.standins.env, "TICKETIQ_DATABASE_URL": self.db_url}
        return self

    def attach(self, standins_base: str, env: dict[str, str]) -> Cluster:
        """Act and judge beside processes another process started (`ticketiq cluster`), whose environment is
        `env`, and its stand-ins at `standins_base`: the token is made as start() makes it, nothing is started."""
        self.token = create_token(env, "cluster-admin", "admin")
        self.standins_base = standins_base
        self.env = {**env, **settings_env(standins_base), "TICKETIQ_DATABASE_URL": self.db_url}
        return self

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def app(self, name: str, port: int | None = None, env: dict[str, str] | None = None, **settings: Any) -> App:
        """A `ticketiq serve` process (on `port`, else a free one) with the cluster's settings, `env` on top
        (e.g. its own database role) and each of `settings` as TICKETIQ_<NAME>."""
        env = {**self.env, **(env or {})}
        for key, value in settings.items():
            env[f"TICKETIQ_{key.upper()}"] = str(value).lower() if isinstance(value, bool) else str(value)
        child, base = start_serve(env, self.tmp, port=port, name=name)
        app = App(child, base)
        self.apps.append(app)
        return app

    def stop(self) -> None:
        try:
            for app in self.apps:
                if app.child.alive():
                    os.kill(app.pid, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
                app.child.stop()
            if self.standins is not None:
                self.standins.stop()
        finally:
            self._closed = True
            for conn in self._opened:
                conn.close()

    @property
    def standin_url(self) -> str:
        if self.standins_base:
            return self.standins_base
        assert self.standins is not None
        return self.standins.env["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")

    # ----- acting ----------------------------------------------------------------------------------

    def post_run(self, app: App, agent: str, text: str) -> str:
        response = web.post(f"{app.base}/v1/runs", json={"agent": agent, "input": text}, headers=self.auth, timeout=30)
        response.raise_for_status()
        return str(response.json()["id"])

    # ----- judging, from the database and the stand-ins -------------------------------------------

    def rows(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        return self._query(sql, params)

    def rows_named(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        return self._query(sql, params)

    def _query(self, sql: str, params: tuple[Any, ...] | dict[str, Any]) -> list[dict[str, Any]]:
        """An autocommit statement, as any process sees the database now, on a connection kept per thread:
        a wait polls every 50 ms, and a new connection each time starts a server backend each time (most
        of the CPU a waiting test spent). One that broke (the server was killed and started again) is
        replaced and the statement sent once more; after stop(), a connection of its own each time."""
        if self._closed:
            with psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row) as own:
                cur = own.execute(sql, params)
                return cur.fetchall() if cur.description else []
        conn = self._connection()
        try:
            cur = conn.execute(sql, params)
        except psycopg.OperationalError:
            if not conn.broken:
                raise
            conn.close()
            cur = self._connection().execute(sql, params)
        return cur.fetchall() if cur.description else []

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        conn: psycopg.Connection[dict[str, Any]] | None = getattr(self._kept, "conn", None)
        if conn is None or conn.closed:
            conn = psycopg.connect(self.db_url, autocommit=True, row_factory=dict_row)
            self._kept.conn = conn
            self._opened.append(conn)
        return conn

    def run(self, run_id: str) -> dict[str, Any]:
        rows = self.rows(
            "SELECT r.*, c.attempt, c.losses, c.step FROM runs r JOIN checkpoints c ON c.run_id = r.id WHERE r.id = %s",
            run_id,
        )
        return rows[0]

    def wait_until(self, check: Callable[[], bool], timeout_s: float, what: str) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if check():
                return time.monotonic() - started
            time.sleep(0.05)
        raise AssertionError(f"{what} did not happen within {timeout_s} s; logs:\n{self.logs()}")

    def wait_run(self, run_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
        self.wait_until(lambda: self.run(run_id)["status"] in TERMINAL, timeout_s, f"run {run_id} ending")
        return self.run(run_id)

    def writes(self, **filters: str) -> list[dict[str, Any]]:
        response = web.get(f"{self.standin_url}/_standin/writes", params=filters, timeout=30)
        response.raise_for_status()
        rows: list[dict[str, Any]] = response.json()
        return rows

    def audit(self, run_id: str, action: str | None = None) -> list[dict[str, Any]]:
        rows = self.rows("SELECT action, detail FROM audit_log WHERE run_id = %s ORDER BY id", run_id)
        return [r for r in rows if action is None or r["action"] == action]

    def logs(self) -> str:
        return "\n".join(f"--- {a.child.name} (pid {a.pid}) ---\n{a.child.log_tail(3000)}" for a in self.apps)


def create_token(env: dict[str, str], name: str, role: str, *agents: str) -> str:
    """A token made by the real CLI, `ticketiq tokens create`, which prints it alone on stdout."""
    more = ["--agents", ",".join(agents)] if agents else []
    made = preforked.run(
        [sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", name, "--role", role, *more],
        env=env, timeout=120,
    )  # fmt: skip
    if made.returncode != 0:
        raise AssertionError(f"ticketiq tokens create exited with {made.returncode}: {made.stderr}")
    return made.stdout.strip()
