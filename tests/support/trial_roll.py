"""The kill trials' `roll` mode (LIYAGENT_KILL_MODE=roll): the app processes are a real `ticketiq cluster
--processes 2` (its stand-ins, its HAProxy edge, its supervision) on the suite's database, started once;
each round begins its trials through the cluster's edge (a cron fire, a Teams turn, a signed webhook, as
in mode `kill`) and, at a random instant while their runs go, runs `ticketiq cluster roll`, which replaces
both app processes one after the other (a new one started and ready, the old one drained at the edge,
then SIGTERMed: it hands its runs over at their next step boundary and exits).

Meanwhile a client (`edge_load.Load`) keeps asking the edge: a readiness probe and a keyed triage run,
each turn. The round fails on any request through the edge that was not served (a /readyz not 200, a POST
not 201 at its first try, no answer at all), the trials' own first requests included; on a roll that
exits non-zero; and, beside the trials' verdicts, on any of the client's runs that did not succeed with
each of its writes applied once (an incident, a Jira comment, an ops-thread reply).

`ticketiq cluster` starts its stand-ins without the model latency the other modes give theirs, and has no
option for it: a `sitecustomize` on the cluster's PYTHONPATH (as tests/support/job_kinds.py gives test job
kinds to a `ticketiq serve`) adds `--model-latency-ms` to the stand-ins' own command line, and nothing else
changes. The latency is ROLL_MODEL_LATENCY_MS, four times the other modes': triage's four model steps then
span some 8 s, so the roll's SIGTERM of the first process (its replacement ready some 3-6 s into the roll
on an idle machine) lands inside the runs that process holds, and they are handed over at their next step
boundary (with 1.5 s, 2 of 30 were: they were mostly in their last step by then; with 2 s, 7 of 15).

A roll meets every process, so a run is caught in flight when it ran across the roll's start (or was
handed over by it). A roll has no outage to recover from, so the recovery notion is bent: a caught run's
recovery is measured from the roll's start to the run's end, and held to the same 15 s as every mode's.
"""

from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from tests.support import preforked
from tests.support.cluster import BASE_SETTINGS, TERMINAL, Cluster
from tests.support.cluster_process import cli, cluster_env, end_cluster, launch_cluster
from tests.support.edge_load import Load
from tests.support.http import web
from tests.support.trial_entries import AGENT_THREAD, declare_trigger, observe
from tests.support.trial_jobs import prepare, stall_searches
from tests.support.trial_rig import END_WITHIN_S, Rig, Round, mcp_figures
from tests.support.trials import DEFAULT_MIX, judge
from ticketiq.operate.launch import free_port

# The roll begins while the round's runs go: they are begun in the first second or so, each some 8 s long.
ROLL_WINDOW_S = (0.8, 2.2)
ROLL_MODEL_LATENCY_MS = 2000
# The client: a turn (a probe, a keyed triage run) every 0.4 s, some 50 runs a round, each as long as a
# trial's: every step of both halves of the roll meets requests and runs in flight, and two cores keep up.
LOAD_PAUSE_S = 0.4
LOAD_AFTER_S = 1.0  # the client goes on this long after the roll, into the new processes
LOAD_FIRST_TICKET = 100_000  # its runs' issues, OPS-100000 on, a block a round: never a trial's ticket
LOAD_TICKETS_A_ROUND = 10_000
# Through the edge a request is not the victim's to lose: one not answered within this failed.
FIRST_TRY_S = 30.0
ROLL_WITHIN_S = 300.0
ROLLED = "rolled: every app process replaced"  # the roll's last line when it replaced every process
SHOWN_FAILURES = 10  # failed requests named per round; the rest are counted
# Every app process the cluster starts (a roll's too) inherits its environment: the leader looks for due
# schedules every 0.2 s, as the survivor of the other modes does, so a trial's cron fire lands at once.
CLUSTER_SETTINGS = {**BASE_SETTINGS, "TICKETIQ_CRON_CHECK_S": "0.2"}
# Run by every Python the cluster starts; acts only in its stand-ins (`python -m ticketiq.cli standins
# ...`: at this point their sys.argv is ['-m', 'standins', ...]), which then parse the added option.
SLOW_MODEL = f"""# Written by tests/support/trial_roll.py: the stand-ins of the kill trials' roll mode answer the model
# {ROLL_MODEL_LATENCY_MS} ms late, as `ticketiq standins --model-latency-ms {ROLL_MODEL_LATENCY_MS}` does.
import sys

if sys.argv[1:2] == ["standins"] and "--model-latency-ms" not in sys.argv:
    sys.argv += ["--model-latency-ms", "{ROLL_MODEL_LATENCY_MS}"]
"""


@dataclass
class RolledCluster:
    """The trial's `ticketiq cluster --processes 2`, on the suite's database: started once, rolled each
    round, ended (SIGINT, then anything it left, by pid) at the end."""

    env: dict[str, str]
    port: int
    proc: subprocess.Popen[str] | None = None
    lines: list[str] = field(default_factory=list)

    @classmethod
    def launch(cls, db_url: str, tmp: Path) -> RolledCluster:
        folder = tmp / "slow-model"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "sitecustomize.py").write_text(SLOW_MODEL)
        inherited = os.environ.get("PYTHONPATH", "")  # a checkout's src run without installing it stays
        path = {"PYTHONPATH": os.pathsep.join(p for p in (str(folder), inherited) if p)}
        made = cls({**cluster_env(tmp, db_url), **CLUSTER_SETTINGS, **path}, free_port())
        made.proc, made.lines = launch_cluster(made.env, made.port)
        return made

    def end(self) -> None:
        if self.proc is not None:
            end_cluster(self.proc, self.lines, self.every_pid())

    def every_pid(self) -> list[int]:
        """Every pid the cluster named, the processes each roll replaced included (left ones are ended)."""
        return [int(m.group(1)) for line in list(self.lines) for m in re.finditer(r"\bpid (\d+)", line)]

    @property
    def edge_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def standins_base(self) -> str:
        """From its line `stand-ins pid 123: http://127.0.0.1:4567`."""
        return next(line.split()[3] for line in self.lines if line.startswith("stand-ins"))

    @property
    def logs_dir(self) -> Path | None:
        """From its line `database  postgresql://...  (logs in /tmp/ticketiq-cluster-...)`."""
        found = next((re.search(r"\(logs in (.+)\)", line) for line in self.lines if line.startswith("database")), None)
        return Path(found.group(1)) if found else None

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def roll(self) -> subprocess.CompletedProcess[str]:
        """`ticketiq cluster roll`, as an operator runs it: SIGHUP to the cluster, its roll's lines followed."""
        return preforked.run(cli("cluster", "roll"), env=self.env, timeout=ROLL_WITHIN_S)

    def logs(self) -> str:
        """The cluster's own output, and the end of each process's log (the replaced ones' too: a roll's new
        process appends to its slot's log)."""
        out = ["--- ticketiq cluster ---", "".join(self.lines[-80:])]
        folder = self.logs_dir
        for path in sorted(folder.glob("*.log")) if folder is not None else []:
            out.append(f"--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)


@dataclass(frozen=True)
class RollSaid:
    """What one roll printed, read line by line (`ticketiq.operate.roll`)."""

    took_s: float | None  # `rolled 2 app processes in 7.8 s`
    ready_s: list[float]  # each new process: started to ready
    handover_s: list[float]  # each old process: SIGTERM to exited, its runs handed over
    killed: int  # old processes that did not exit within the grace and were killed
    drained_late: int  # old processes with requests still open when the drain gave up waiting

    @classmethod
    def of(cls, text: str) -> RollSaid:
        took = re.search(r"rolled \d+ app processes in ([\d.]+) s", text)
        handed = r"handed its runs over and exited \(code -?\d+\) in ([\d.]+) s"
        return cls(
            took_s=float(took.group(1)) if took else None,
            ready_s=[float(s) for s in re.findall(r": pid \d+ ready in ([\d.]+) s", text)],
            handover_s=[float(s) for s in re.findall(handed, text)],
            killed=len(re.findall(r"did not exit within [\d.]+ s and was killed", text)),
            drained_late=len(re.findall(r"requests still open after", text)),
        )


class RollRig(Rig):
    """Mode `roll`: the trials begun through the cluster's edge (no victim of their own: the roll strikes
    both processes), the roll at its instant, the client throughout."""

    def __init__(
        self, cluster: Cluster, rolled: RolledCluster, rng: random.Random, mix: tuple[str, ...] = DEFAULT_MIX
    ) -> None:
        super().__init__(cluster, "roll", rng, None, mix)
        self.rolled = rolled
        self.first_try_s = FIRST_TRY_S
        self.took_s: list[float] = []
        self.ready_s: list[float] = []
        self.handover_s: list[float] = []

    @property
    def edge_base(self) -> str:
        return self.rolled.edge_base

    def start(self) -> None:
        declare_trigger(self.cluster, self.edge_base)
        self._model_is_slow()
        if "sync" in self.mix:
            stall_searches(self.cluster)

    def stop(self) -> None:
        """Nothing of its own to stop: the test ends the cluster."""

    def _model_is_slow(self) -> None:
        """The cluster's stand-ins took the latency (else every run would end long before a roll reached
        its process, and the mode would test little): one completion asked of them, timed."""
        ask = {"model": "triage", "messages": [{"role": "user", "content": "Triage OPS-1: checkout is failing"}]}
        began = time.monotonic()
        answered = web.post(f"{self.cluster.standin_url}/v1/chat/completions", json=ask, timeout=30)
        took = time.monotonic() - began
        answered.raise_for_status()
        assert took >= ROLL_MODEL_LATENCY_MS / 1000, (
            f"the cluster's stand-ins answered the model in {took:.2f} s: its sitecustomize did not give them "
            f"--model-latency-ms {ROLL_MODEL_LATENCY_MS}\n{self.logs()}"
        )

    def logs(self) -> str:
        return self.rolled.logs()

    def play(self, no: int) -> Round:
        if not self.rolled.running():
            raise AssertionError(f"round {no}: the cluster is not running\n{self.logs()}")
        played = Round(no)
        trials = self._trials(no)
        for trial in trials:
            prepare(self.cluster, trial)
        since = self._db_now()
        load = Load(self.edge_base, self.cluster.auth, f"roll-{no}-{uuid.uuid4().hex[:8]}",
                    first_ticket=LOAD_FIRST_TICKET + no * LOAD_TICKETS_A_ROUND, pause_s=LOAD_PAUSE_S)  # fmt: skip
        client = threading.Thread(target=load.run, name="edge-load", daemon=True)
        client.start()
        up = time.monotonic()
        try:
            with ThreadPoolExecutor(len(trials)) as pool:
                fired = threading.Event()
                if not any(t.kind == "cron" for t in trials):
                    fired.set()
                begun = [pool.submit(self._begin, t, self.edge_base, fired, "") for t in trials]
                time.sleep(max(0.0, up + self.rng.uniform(*ROLL_WINDOW_S) - time.monotonic()))
                event_at = self._db_now()
                played.problems += self._roll(played)
                for future, trial in zip(begun, trials, strict=True):
                    try:
                        future.result()
                    except Exception as exc:
                        played.problems.append(f"round {no} {trial.kind}: could not begin: {exc}")
            time.sleep(LOAD_AFTER_S)
        finally:
            load.halt.set()
            client.join(90)
        self._await_end(trials)
        failed = load.failed() + [f"{t.kind} {t.subject}: its first request through the edge was not served (no "
                                  "answer, or 5xx), and was sent again" for t in trials if t.interrupted]  # fmt: skip
        played.problems += [f"round {no}: {f}" for f in failed[:SHOWN_FAILURES]]
        if len(failed) > SHOWN_FAILURES:
            played.problems.append(f"round {no}: and {len(failed) - SHOWN_FAILURES} more requests not served")
        played.extra.update(client_requests=load.requests + len(trials), client_requests_failed=len(failed))
        played.problems += self._load_runs(load, since, played)
        seen = [observe(self.cluster, t) for t in trials]
        # Every process meets a roll: a run going at its start was caught, wherever it ran (spanning).
        played.verdicts = [judge(t, s, event_at, spanning=True) for t, s in zip(trials, seen, strict=True)]
        played.extra["trial_runs_handed_over"] = sum(s.handed > 0 for s in seen)
        played.extra.update(mcp_figures(trials, seen))
        return played

    def _roll(self, played: Round) -> list[str]:
        """`ticketiq cluster roll`, and what it said it did; a problem unless it replaced every process."""
        began = time.monotonic()
        done = self.rolled.roll()
        said = RollSaid.of(done.stdout)
        self.took_s.append(said.took_s if said.took_s is not None else time.monotonic() - began)
        self.ready_s += said.ready_s
        self.handover_s += said.handover_s
        # Text, so that the rounds' figures are not summed; the per-process figures are both processes'.
        played.extra.update(
            roll_s=_spread(self.took_s, "rolls") + ": " + ", ".join(f"{t:.1f}" for t in self.took_s),
            new_process_ready_s=_spread(self.ready_s, "processes"),
            old_process_handover_s=_spread(self.handover_s, "processes"),
            old_processes_killed=said.killed, drains_given_up=said.drained_late,
        )  # fmt: skip
        problems = []
        if done.returncode != 0 or not done.stdout.rstrip().endswith(ROLLED):
            problems.append(f"round {played.no}: `ticketiq cluster roll` exited {done.returncode}:\n{done.stdout}"
                            f"{done.stderr[-2000:]}")  # fmt: skip
        elif said.took_s is None or len(said.ready_s) != 2 or len(said.handover_s) + said.killed != 2:
            # A roll of both processes says each step: its figures read here would be missing, not zero.
            problems.append(f"round {played.no}: the roll's lines were not read (has its wording changed?):\n"
                            f"{done.stdout}")  # fmt: skip
        if said.killed:  # its runs were then taken over as lost, not handed over
            problems.append(f"round {played.no}: the roll killed {said.killed} old process(es) past the grace:\n"
                            f"{done.stdout}")  # fmt: skip
        return problems

    def _load_runs(self, load: Load, since: datetime, played: Round) -> list[str]:
        """The client's runs: each ended, succeeded, with each of its writes applied once (an incident, a Jira
        comment, an ops-thread reply), whether or not a roll handed it over mid-run."""
        ids = list(load.runs.values())
        deadline = time.monotonic() + END_WITHIN_S
        while True:
            runs = {r["id"]: r for r in self.cluster.rows(_CLIENT_RUNS, ids)}
            going = [i for i in ids if runs.get(i, {}).get("status") not in TERMINAL]
            if not going or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        issues = {load.issue(ticket): run_id for ticket, run_id in load.runs.items()}
        params = {"issues": list(issues), "since": since, "thread": AGENT_THREAD}
        writes = {r["issue"]: r for r in self.cluster.rows_named(_CLIENT_WRITES, params)}
        played.extra.update(client_runs=len(ids), client_runs_handed_over=sum(int(r["handed"]) > 0
                                                                              for r in runs.values()))  # fmt: skip
        problems = []
        for issue, run_id in issues.items():
            status = runs.get(run_id, {}).get("status")
            if status != "succeeded":
                problems.append(f"round {played.no}: the client's run for {issue} ({run_id}) is {status}, "
                                f"not succeeded, {END_WITHIN_S:g} s after the trials ended")  # fmt: skip
                continue
            counts = {k: int(writes.get(issue, {}).get(k) or 0) for k in ("incidents", "comments", "replies")}
            if set(counts.values()) != {1}:
                problems.append(f"round {played.no}: the client's run for {issue} ({run_id}) left {counts}, "
                                "not one of each")  # fmt: skip
        return problems


# The client's runs, and how many attempts of each were handed back by a stopping process.
_CLIENT_RUNS = """
SELECT r.id::text AS id, r.status,
       (SELECT count(*) FROM run_attempts a WHERE a.run_id = r.id AND a.ended = 'handed_back') AS handed
  FROM runs r WHERE r.id = ANY(%s::uuid[])
"""
# Each of its issues' applied writes, as the trials count theirs (trial_entries._OBSERVE); only the round's.
_CLIENT_WRITES = """
WITH w AS (SELECT vendor, target, body::text AS body FROM standin.writes
            WHERE effect = 'applied' AND received_at >= %(since)s)
SELECT i AS issue,
       (SELECT count(*) FROM w WHERE vendor = 'incidentio' AND body LIKE '%%' || i || ':%%') AS incidents,
       (SELECT count(*) FROM w WHERE vendor = 'jira' AND target = i) AS comments,
       (SELECT count(*) FROM w WHERE vendor = 'teams' AND target = %(thread)s
                                 AND body LIKE '%%Triaged ' || i || ':%%') AS replies
  FROM unnest(%(issues)s::text[]) AS i
"""


def _spread(values: list[float], what: str) -> str:
    if not values:
        return "none"
    return f"median {statistics.median_low(values):.1f} s, max {max(values):.1f} s over {len(values)} {what}"
