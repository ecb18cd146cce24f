"""The kill trials' rig: a survivor app process (the leader, running the app's own recovery jobs) and,
each round, a fresh victim on a fixed port, both behind HAProxy; the round's records begun on the
victim, one trial of each kind in the mix (LIYAGENT_KILL_MIX: cron, teams, webhook and mcp, a run of
the MCP server's tools, by default; sync and workflow begin background jobs, `trial_jobs.py`); then the
mode's event at a random instant; then the verdicts, read from the database.

Modes (LIYAGENT_KILL_MODE):
- `kill`: SIGKILL the victim 0.2 s to 4 s (uniformly) after it is up.
- `stop`: SIGSTOP it instead, 0.8 s to 2.2 s after it is up (while the round's runs go, `STOP_WINDOW_S`),
  past its lease (the survivor takes every run over), then SIGCONT: from then on it must make no vendor
  call (the stand-ins record each request's User-Agent, which names the pid) and no database write of any
  kind (it connects as its own role, so `pg_stat_statements` counts the WAL records its statements wrote).
- `db`: SIGKILL the suite's embedded Postgres (its postmaster) 0.8 s to 2.2 s after the victim is up,
  while the round's runs go (`DB_KILL_WINDOW_S`): every connection is cut
  and nobody restarts it but the app processes, which run with the suite's home as their TICKETIQ_HOME
  and so know its URL for their home's embedded server: one of them starts it again on its port, and
  every process reconnects and goes on. Measured: the SIGKILL to the server answering again.
- `dbrestart`: as `db`, but each round at random either the same SIGKILL, or `ticketiq db stop` then
  `ticketiq db url` as a person runs them by hand (`trial_postgres.py`): stopped on purpose, the server must
  be left stopped by every process until `db url` starts it again on its port. Which way is recorded.
- `failover` and `stall` (`trial_formation.py`): the processes run on a pg_auto_failover formation whose
  primary node is SIGKILLed (failover) or SIGSTOPped past its health checks (stall) while the round's
  runs, its source sync and its workflow go; the old node is brought back between rounds.
- `vendor`: Jira stalls the round's comments; the victim is SIGKILLed while its comment is held at the
  vendor (which then applies it). Jira has no idempotency key, so the survivor must wait until the
  comment can no longer be in flight and read it back (I14): still one comment.
- `roll` (`trial_roll.py`, its own rig): the processes are a real `ticketiq cluster --processes 2`, and
  each round `ticketiq cluster roll` replaces both while the round's runs go and a client keeps sending
  requests through the cluster's edge, every one of which must be served.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from tests.support.cluster import App, Cluster
from tests.support.http import web
from tests.support.trial_entries import FIRST_TRY_S, begin, declare_trigger, finished, observe
from tests.support.trial_formation import FORMATION_MODES, STRIKE_WINDOW_S, SYNC_SEARCH_STALL_S, FormationRig
from tests.support.trial_jobs import SEARCH_STALL_S, SURVIVOR_JOB_POLL_S, first_claim, prepare, stall_searches
from tests.support.trial_postgres import KILL, POSTGRES_MODES, STOP_AND_URL, Restarts
from tests.support.trials import DEFAULT_MIX, JOB_KINDS, Observed, Seen, Trial, Verdict, judge
from ticketiq.dbserver.authentication import password_of
from ticketiq.operate.edge import Backend, start_edge
from ticketiq.operate.launch import Child, free_port

MODES = ("kill", "stop", *POSTGRES_MODES, "vendor", *FORMATION_MODES, "roll")
KILL_WINDOW_S = (0.2, 4.0)
# The Postgres modes strike while the round's runs go (begun about 0.4 s after the victim is up, each about
# 2.2 s long): a Postgres killed before they began or after they ended tests only that the processes reconnect.
DB_KILL_WINDOW_S = (0.8, 2.2)
# Stop mode proves that a process stalled past its lease does nothing once it goes on: that is tested only
# by runs it held when it stopped, so it stops while the round's runs go, as the Postgres modes strike. With
# the kill window (runs before, in and after), about half its rounds caught none: 24 of 50 in one run of
# `make evidence`, below the half the harness asks for.
STOP_WINDOW_S = DB_KILL_WINDOW_S
MODEL_LATENCY_MS = 500  # triage's four steps then span about 2 s, so kills land before, in and after runs
END_WITHIN_S = 45.0  # a trial not ended this long after the event is lost
STALLED_ROLE = "tq_stalled"
FIRE_LANDS_S = 1.0  # how long the delivery and the Teams turn wait for the cron fire's run to be made
STALL_S = 4.0  # vendor mode: how long Jira holds a comment
RESUME_WATCH_S = 3.0  # stop mode: how long the resumed process is watched
# Stop mode shortens the lease (4 s, renewed every 1 s) and a write's budget (5 s), so a round waits 4 s
# rather than 8 s for the takeover, and a write the stalled process marked in doubt just before it
# stopped is read back 5 s after its mark rather than 10 s (I14: until then the stalled process might
# still send it). With the defaults a stall recovers in up to 8 s + 10 s + the run's remaining steps.
# Everything else is the default; the result file lists these settings.
# The formation modes open connections with libpq's least connect timeout (2 s): a frozen old primary,
# first in the multi-host URL, costs every new connection that long before the next host is tried.
MODE_SETTINGS: dict[str, dict[str, Any]] = {
    "stop": {"lease_ttl_s": 4, "lease_renew_s": 1, "write_budget_s": 5},
    "failover": {"db_connect_timeout_s": 2},
    "stall": {"db_connect_timeout_s": 2},
}
# The Jira comments each kind's trial makes (vendor mode stalls that many a round): triage one, the
# follow-up workflow two.
COMMENTS = {"cron": 1, "teams": 1, "webhook": 1, "workflow": 2}


@dataclass
class Round:
    no: int
    verdicts: list[Verdict] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class Rig:
    def __init__(
        self,
        cluster: Cluster,
        mode: str,
        rng: random.Random,
        pg_home: Path | None,
        mix: tuple[str, ...] = DEFAULT_MIX,
        formation: FormationRig | None = None,
    ) -> None:
        assert mode in MODES, mode
        assert (formation is not None) == (mode in FORMATION_MODES), "the formation modes need a formation"
        self.formation = formation
        self.cluster = cluster
        self.mode = mode
        self.mix = mix
        self.rng = rng
        self.pg_home = pg_home
        self.settings = dict(MODE_SETTINGS.get(mode, {}))
        self.victim_port = free_port()
        self.edge_port = free_port()
        self.edge: Child | None = None
        self.survivor: App | None = None
        self.next_ticket = 1000
        self.first_try_s = FIRST_TRY_S  # a request to the victim not answered by then was cut by the event
        # The Postgres modes: the suite's embedded server, which the processes' URL names.
        self.restarts = Restarts(pg_home, cluster.db_url) if mode in POSTGRES_MODES and pg_home is not None else None

    @property
    def edge_base(self) -> str:
        return f"http://127.0.0.1:{self.edge_port}"

    def start(self) -> None:
        # With jobs in the mix the survivor's worker looks for queued ones only every second: the
        # victim's, woken the moment it makes one, claims it (the survivor's takes it over after the event).
        jobs: dict[str, Any] = {"job_poll_s": SURVIVOR_JOB_POLL_S} if set(self.mix) & set(JOB_KINDS) else {}
        self.survivor = self.cluster.app("survivor", env=self._home_env(), lead=True, cron_check_s=0.2, **jobs,
                                         **self.settings)  # fmt: skip
        declare_trigger(self.cluster, self.survivor.base)
        if "sync" in self.mix:
            stall_searches(self.cluster, SYNC_SEARCH_STALL_S if self.formation else SEARCH_STALL_S)
        survivor_port = int(self.survivor.base.rsplit(":", 1)[1])
        backends = [Backend("survivor", "127.0.0.1", survivor_port), Backend("victim", "127.0.0.1", self.victim_port)]
        self.edge = start_edge(self.edge_port, backends, self.cluster.tmp / "edge")
        if self.mode == "stop":
            self.cluster.rows(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{STALLED_ROLE}') THEN "
                f"CREATE ROLE {STALLED_ROLE} LOGIN SUPERUSER; END IF; END $$"
            )
            # The URL's own password (the suite's server asks every role for one): with_user keeps it.
            password = password_of(self.cluster.db_url)
            if password is not None:
                self.cluster.rows(f"ALTER ROLE {STALLED_ROLE} PASSWORD '{password}'")

    def stop(self) -> None:
        if self.edge is not None:
            self.edge.stop()

    def logs(self) -> str:
        """The end of each app process's log, for a failure's message."""
        return self.cluster.logs()

    # ----- one round -------------------------------------------------------------------------------

    def play(self, no: int) -> Round:
        played = Round(no)
        trials = self._trials(no)
        for trial in trials:
            prepare(self.cluster, trial)
        if self.mode == "vendor":
            self._stall_comments(sum(COMMENTS.get(t.kind, 0) for t in trials))
        victim = self.cluster.app(f"victim{no}", port=self.victim_port, env=self._victim_env(), lead=False,
                                  **self.settings)  # fmt: skip
        up = time.monotonic()
        holder = str(web.get(f"{victim.base}/readyz", timeout=10).json()["process"])
        try:
            with ThreadPoolExecutor(len(trials)) as pool:
                fired = threading.Event()
                if not any(t.kind == "cron" for t in trials):
                    fired.set()
                begun = [pool.submit(self._begin, t, victim.base, fired, holder) for t in trials]
                event_at, before = self._strike(victim, holder, up, played)
                for future, trial in zip(begun, trials, strict=True):
                    try:
                        future.result()
                    except Exception as exc:
                        played.problems.append(f"round {no} {trial.kind}: could not begin: {exc}")
            self._await_end(trials)
            if self.mode in (*POSTGRES_MODES, *FORMATION_MODES):
                played.problems += self._reconnected(victim, played.no)
            if self.mode == "stop":
                played.problems += self._resumed_quietly(victim, before, played)
            if self.mode == "vendor":
                played.extra["stalled_comments_landed_after_kill"] = self._landed_after(trials, event_at)
            claimed = [t.claimed_by for t in trials if t.kind in JOB_KINDS]
            if claimed:
                played.extra["jobs_claimed_by_survivor"] = claimed.count("survivor")
                played.extra["jobs_claimed_by_victim"] = claimed.count("victim")
            spanning = self.mode in (*POSTGRES_MODES, *FORMATION_MODES)
            seen = [observe(self.cluster, t) for t in trials]
            played.verdicts = [judge(t, s, event_at, spanning) for t, s in zip(trials, seen, strict=True)]
            played.extra.update(mcp_figures(trials, seen))
            if self.formation is not None:
                # Each process should have re-taken its mark under its own identity (leader.retake): one
                # found dead lost its runs for the failover alone (the victim is killed only after this).
                dead = "SELECT count(*) AS n FROM processes WHERE ended_how = 'died' AND ended_at >= %s"
                played.extra["processes_found_dead"] = int(self.cluster.rows(dead, event_at)[0]["n"])
            if claimed:  # how the event caught the jobs: taken over from the victim, or their request cut
                played.extra["jobs_taken_over"] = sum(s.losses > 0 for t, s in zip(trials, seen, strict=True)
                                                      if t.kind in JOB_KINDS)  # fmt: skip
                played.extra["jobs_requests_cut"] = sum(t.interrupted for t in trials if t.kind in JOB_KINDS)
        finally:
            if victim.child.alive():
                os.kill(victim.pid, signal.SIGCONT)
                victim.child.kill()
        if self.mode in (*POSTGRES_MODES, *FORMATION_MODES):
            assert self.survivor is not None
            played.problems += self._reconnected(self.survivor, played.no)
        if self.formation is not None:
            played.extra.update(self._formation_back(played))
        return played

    def _begin(self, trial: Trial, victim_base: str, fired: threading.Event, holder: str) -> None:
        """The cron fire first: the leader gives its run to the least loaded live process, which is the
        victim only while it has no runs yet; the delivery, the Teams turn and the jobs follow once the
        fire's run is made (or after a second). A job's first claim is recorded."""
        if trial.kind != "cron":
            fired.wait(FIRE_LANDS_S)
            begin(self.cluster, trial, victim_base, self.edge_base, self.first_try_s)
            if trial.kind in JOB_KINDS:
                trial.claimed_by = first_claim(self.cluster, trial, holder)
            return
        try:
            begin(self.cluster, trial, victim_base, self.edge_base, self.first_try_s)
            deadline = time.monotonic() + FIRE_LANDS_S
            query = "SELECT 1 FROM schedule_fires WHERE schedule_id::text = %s AND run_id IS NOT NULL"
            while time.monotonic() < deadline and not self._rows_unless_down(query, trial.ref):
                time.sleep(0.02)
        finally:
            fired.set()

    def _trials(self, no: int) -> list[Trial]:
        """One trial of each kind in the mix, each with its own ticket (a sync: its own project)."""
        made = []
        for kind in self.mix:
            n = self.next_ticket
            self.next_ticket += 1
            if kind == "webhook":
                made.append(Trial("webhook", n, no, ref=f"trial-{n}"))
            elif kind == "teams":
                made.append(
                    Trial("teams", n, no, ref=f"1700{n:09d}", conversation=f"19:trial-{n}@thread.tacv2;messageid=1")
                )
            else:  # cron: the schedule's id; a job: its id, once made
                made.append(Trial(kind, n, no, ref=""))
        return made

    def _victim_env(self) -> dict[str, str]:
        if self.mode != "stop":
            return self._home_env()
        return {"TICKETIQ_DATABASE_URL": with_user(self.cluster.db_url, STALLED_ROLE)}

    def _home_env(self) -> dict[str, str]:
        """The Postgres modes: the suite's home, whose embedded server the processes' URL names: they watch
        it and start it again once it is killed."""
        return {"TICKETIQ_HOME": str(self.pg_home)} if self.restarts is not None else {}

    # ----- the event ---------------------------------------------------------------------------------

    def _strike(self, victim: App, holder: str, up: float, played: Round) -> tuple[datetime, dict[int, dict[str, Any]]]:
        """The mode's event at its instant; returns when it happened (database clock) and, in stop mode,
        the victim's statement counts just before it was let go on."""
        if self.mode == "vendor":
            held = self._held_at_vendor(holder)
            played.extra["stall_engaged"] = held
            time.sleep(self.rng.uniform(0.3, STALL_S - 1.0) if held else 0.0)
        else:
            window = (DB_KILL_WINDOW_S if self.mode in POSTGRES_MODES else STRIKE_WINDOW_S if self.formation
                      else STOP_WINDOW_S if self.mode == "stop" else KILL_WINDOW_S)  # fmt: skip
            time.sleep(max(0.0, up + self.rng.uniform(*window) - time.monotonic()))
        at = self._db_now()
        if self.formation is not None:
            struck = self.formation.strike(self.mode)
            if struck.acknowledged_by_old:
                played.problems.append(f"round {played.no}: {struck.probe}")
            played.extra.update(self._struck_extra(struck))
        elif self.mode in ("kill", "vendor"):
            victim.child.kill()
        elif self.mode == "stop":
            os.kill(victim.pid, signal.SIGSTOP)
            self.cluster.wait_until(lambda: not self._holds_leases(holder), 60, "the survivor taking the stalled runs")
        else:
            self._restart_postgres(victim, played)
        before = self._statements() if self.mode == "stop" else {}
        return at, before

    def _held_at_vendor(self, holder: str) -> bool:
        """Wait until the victim's Jira comment is marked in doubt (about to be, or being, sent)."""
        query = """SELECT 1 FROM calls c JOIN leases l ON l.name = 'checkpoint:' || c.run_id
                    WHERE l.holder = %s AND c.tool = 'jira_add_comment' AND c.status = 'in_doubt'"""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.cluster.rows(query, holder):
                return True
            time.sleep(0.02)
        return False

    def _landed_after(self, trials: list[Trial], event_at: datetime) -> int:
        """How many of the round's comments the vendor applied after the kill: held across it."""
        issues = [f"OPS-{t.ticket}" for t in trials]
        query = """SELECT count(*) AS n FROM standin.writes WHERE vendor = 'jira' AND operation = 'add_comment'
                    AND effect = 'applied' AND target = ANY(%s) AND received_at > %s"""
        return int(self.cluster.rows(query, issues, event_at)[0]["n"])

    def _stall_comments(self, count: int) -> None:
        fault = {"vendor": "jira", "operation": "add_comment", "mode": "stall", "stall_s": STALL_S, "count": count}
        web.post(f"{self.cluster.standin_url}/_standin/faults", json=fault, timeout=10).raise_for_status()

    def _await_end(self, trials: list[Trial]) -> None:
        deadline = time.monotonic() + END_WITHIN_S
        while time.monotonic() < deadline:
            if all(t.ref and finished(observe(self.cluster, t)) for t in trials):
                return
            time.sleep(0.1)

    # ----- the formation modes ----------------------------------------------------------------------

    def _struck_extra(self, struck: Any) -> dict[str, Any]:
        assert self.formation is not None
        outages = sorted(s.outage_s for s in self.formation.struck)
        extra: dict[str, Any] = {
            # Text, so that the rounds' figures are not summed: the strike to the URL taking writes again.
            "outage_s": f"median {outages[len(outages) // 2]:.1f} s, max {outages[-1]:.1f} s over {len(outages)} "
                        f"tries: {self.formation.outages()}",
        }  # fmt: skip
        if self.mode == "stall":
            extra["old_primary_acknowledged"] = struck.acknowledged_by_old
            extra["old_primary_probe"] = struck.probe
        return extra

    def _formation_back(self, played: Round) -> dict[str, Any]:
        """The struck node back as the synchronous standby before the next round (one copy until then);
        and how many processes were found dead for the failover alone (each should have re-taken its
        mark under its own identity)."""
        assert self.formation is not None
        try:
            took = self.formation.back()
        except Exception as exc:
            played.problems.append(f"round {played.no}: the old node did not come back: {exc}")
            return {}
        return {"node_back_s_total": round(took, 1)}

    # ----- stop mode: the resumed process must do nothing -----------------------------------------

    def _holds_leases(self, holder: str) -> bool:
        return bool(self.cluster.rows("SELECT 1 FROM leases WHERE holder = %s AND expires_at > now()", holder))

    def _statements(self) -> dict[int, dict[str, Any]]:
        rows = self.cluster.rows(
            "SELECT s.queryid, s.query, s.calls, s.wal_records FROM pg_stat_statements s "
            "JOIN pg_roles r ON r.oid = s.userid WHERE r.rolname = %s", STALLED_ROLE,
        )  # fmt: skip
        return {int(r["queryid"]): r for r in rows}

    def _resumed_quietly(self, victim: App, before: dict[int, dict[str, Any]], played: Round) -> list[str]:
        """SIGCONT the stalled victim and watch it: no vendor call, no database write of any kind."""
        resumed_at = self._db_now()
        os.kill(victim.pid, signal.SIGCONT)
        deadline = time.monotonic() + RESUME_WATCH_S
        while time.monotonic() < deadline and victim.child.alive():
            time.sleep(0.05)
        played.extra["exited_after_resume"] = not victim.child.alive()
        calls = self.cluster.rows(
            "SELECT vendor, operation, target FROM standin.writes WHERE client LIKE %s AND received_at >= %s",
            f"%pid/{victim.pid} %", resumed_at,
        )  # fmt: skip
        asked = self.cluster.rows(
            "SELECT count(*) AS n FROM standin.model_requests WHERE client LIKE %s AND received_at >= %s",
            f"%pid/{victim.pid} %", resumed_at,
        )[0]["n"]  # fmt: skip
        wrote = []
        for queryid, row in self._statements().items():
            was = before.get(queryid, {"calls": 0, "wal_records": 0})
            if int(row["wal_records"]) > int(was["wal_records"]):
                wrote.append(
                    f"{int(row['wal_records']) - int(was['wal_records'])} WAL records by: {row['query'][:160]}"
                )
        played.extra.update(vendor_calls_after_resume=len(calls), model_calls_after_resume=int(asked),
                            db_writes_after_resume=len(wrote))  # fmt: skip
        problems = [f"round {played.no}: the resumed process called {c['vendor']} {c['operation']} {c['target']}"
                    for c in calls]  # fmt: skip
        problems += [f"round {played.no}: the resumed process asked the model {asked} times"] if asked else []
        problems += [f"round {played.no}: the resumed process wrote {w}" for w in wrote]
        return problems

    # ----- the Postgres modes: the server back on its port, and every process reconnects -----------------

    def _restart_postgres(self, victim: App, played: Round) -> None:
        """db: SIGKILL the postmaster. dbrestart: at random that, or `ticketiq db stop` then `ticketiq db url`.
        Returns once the server answers again (`trial_postgres.py`)."""
        assert self.restarts is not None and self.survivor is not None
        way = KILL if self.mode == "db" or self.rng.random() < 0.5 else STOP_AND_URL
        if way == KILL:
            problems = self.restarts.kill(self.cluster.logs)
        else:
            problems = self.restarts.stop_and_start([self.survivor, victim], self.cluster.logs)
        played.problems += [f"round {played.no}: {p}" for p in problems]
        if self.mode == "db":  # text, so that the rounds' figures are not summed
            played.extra["postgres_back_s"] = self.restarts.spread(KILL)
        else:
            played.extra.update(self.restarts.extra(way))

    def _reconnected(self, app: App, no: int) -> list[str]:
        """The process is up and ready again (its pool, liveness and leases back on the new server)."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and app.child.alive():
            try:
                if web.get(f"{app.base}/readyz", timeout=5).status_code == 200:
                    return []
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return [f"round {no}: {app.child.name} was not ready again within 15 s of its trials' end (Postgres struck)"]

    def _rows_unless_down(self, query: str, *params: Any) -> list[dict[str, Any]]:
        """The rows; none while Postgres is down (db mode kills it while records are begun)."""
        try:
            return self.cluster.rows(query, *params)
        except psycopg.OperationalError:
            return []

    def _db_now(self) -> datetime:
        deadline = time.monotonic() + 30
        while True:
            try:
                now: datetime = self.cluster.rows("SELECT clock_timestamp() AS now")[0]["now"]
                return now
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def mcp_figures(trials: list[Trial], seen: list[Seen]) -> dict[str, int]:
    """How the round's MCP runs went, for the report: an add_note the event left in doubt is settled unknown
    (never sent again), landed or not; a set_note in doubt is sent again with the same arguments."""
    runs = [s for t, s in zip(trials, seen, strict=True) if t.kind == "mcp" and isinstance(s, Observed)]
    if not runs:
        return {}
    unknown = [s for s in runs if s.run_status == "succeeded" and not s.add_done]
    return {
        "mcp_add_note_settled_unknown": len(unknown),
        "mcp_add_note_settled_unknown_but_applied": sum(s.adds > 0 for s in unknown),
        "mcp_set_note_applied_more_than_once": sum(s.sets > 1 for s in runs),
    }


def with_user(url: str, user: str) -> str:
    """The same database URL with its password, connecting as `user` (made with that password)."""
    parts = urlsplit(url)
    userinfo, _, host = parts.netloc.rpartition("@")
    _, colon, password = userinfo.partition(":")
    return urlunsplit(parts._replace(netloc=f"{user}{colon}{password}@{host}"))
