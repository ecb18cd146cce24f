"""Scale: run throughput over 1, 2 and 4 app processes, where the limit is, what the leader's sweep costs
with a million finished runs, and how a killed process's runs spread over the survivors.

    .venv/bin/python bench/scale.py [--runs 400] [--processes 1,2,4] [--finished 1000000]
                                    [--killed-runs 20] [--sweep-calls 50] [--json PATH]
                                    [--parts throughput,sweep,spread] [--profile DIR]

Everything runs for real: an embedded Postgres (its own, in a temporary home), the stand-ins and
`ticketiq serve` processes as subprocesses. It prints figures and asserts none.

1. Throughput. For each process count: a fresh database, that many `ticketiq serve` processes and
   the stand-ins with model latency 0 (`--model-latency-ms 0`). `--runs` runs of the `reader` agent
   (three read-only steps, each one checkpoint statement, then the answer) are submitted at once,
   spread round-robin over the processes' APIs, and driven to their end. Runs/s is runs over the time
   from the first submit to the last `finished_at` (database clock). Per run: the app processes' CPU
   (ms), statements and commits. With `--profile DIR`, py-spy samples the one process of the 1-process
   case from outside (it does not pause it) and the top ten functions by own time are printed
   (`profile_app.py`); its raw stacks are kept in DIR.
2. Statements. The database's committed transactions (`pg_stat_database.xact_commit`) and statements
   (`pg_stat_statements` calls, top level) during that time, per second; the bench's own polling is
   subtracted. A backend reports its transactions up to 10 s late (PGSTAT_IDLE_INTERVAL), so commits
   are read 11 s after, less what the idle processes commit meanwhile (measured before the runs). The
   two do not count the same things (measured here on PostgreSQL 18: 100 executions of a statement
   psycopg prepared counted 2 commits; unprepared, 100), so `statements_per_s` is the statement rate.
3. The limit. CPU seconds used in that time by Postgres (the postmaster and its children, from
   /proc: utime + stime, with the children it reaped), by the app processes, by the stand-ins and
   by this bench's HTTP client, beside the wall time and the machine's cores; the `limit` line says
   which saturates.
4. The sweep. Each statement the leader's sweep makes (and `take_up`, every process's look for runs
   given to it), timed as a median of `--sweep-calls` round trips, with 0 and with `--finished`
   finished runs in the tables it reads (runs, checkpoints, approvals, inputs, schedule fires, the
   Teams inbox, ended processes; inserted with generate_series: `history.py`), beside 100 live leases
   of a live process. A statement whose time grows with the finished runs is flagged. Beside them, the
   run list (`GET /v1/runs`): a page of each filter, and the counts by status, as the app reads them
   (`run_list_timing.py`); its budget is 50 ms a page at 1,000,000 runs.
5. The spread. Three processes (a leader and two that do not lead); `--killed-runs` runs are put in
   flight on one of the others (stand-ins with model latency 1 s), which is SIGKILLed; how many runs
   each survivor resumed (their `agent.run.crash_resumed` audit rows) and how long each took.

`--json PATH` writes every figure as one JSON object:

    {"throughput": [{"processes": n, "runs": R, "failed": F, "seconds": s, "runs_per_s": r,
                     "commits_per_s": c, "statements_per_s": q,
                     "cpu": {"postgres_s", "apps_s", "apps": [per process], "standins_s", "client_s",
                             "wall_s", "cores", "busy_cores"},
                     "limit": "which saturates, in words",
                     "busiest_statements": [{"statement": first words, "per_run": calls a run}]}],
     "sweep": [{"finished_runs": 0 | N, "statements": {name: median ms},
                "seq_scans": {name: [tables its plan reads whole]} (with N only),
                "run_list": {"pages_ms": {case: median ms}, "slowest": case, "seq_scans": {...} (with N)}}],
     "sweep_grows": [names whose time grew],
     "spread": {"killed_runs": K, "taken": {process: runs}, "recovery_s": {process: [seconds]},
                "losses": [distinct loss counts]},
     "machine": {"cores", "cpu", "memory_gb", "load_before", "python", "postgres", "kernel"}}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

import run_list_timing
from history import fill
from profile_app import Sampler, print_summary, summary
from ticketiq.dbserver import embedded
from ticketiq.operate.launch import Child, start_serve, start_standins
from ticketiq.storage.migrate import migrate
from ticketiq.storage.queries import QUERIES

TERMINAL = ("succeeded", "failed", "interrupted", "stopped")
CLK_TCK = os.sysconf("SC_CLK_TCK")
SEAL_KEYS = "bench:scale-secret"
IN_FLIGHT = 64  # requests the bench has in flight at once
STATS_LAG_S = 11.0  # PGSTAT_IDLE_INTERVAL (10 s): how late an idle backend reports its transactions


# ----- the machine and its processes ---------------------------------------------------------------


def proc_stat(pid: int) -> list[str]:
    """/proc/<pid>/stat's fields from the third (state) on: the name in parentheses may hold spaces."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_s(pid: int, reaped: bool = False) -> float:
    """utime + stime of a process (and with `reaped`, of the children it waited for), in seconds."""
    try:
        fields = proc_stat(pid)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if reaped else 0)
    return ticks / CLK_TCK


def system_s(pid: int) -> float:
    """stime alone: the CPU a process spent in the kernel (system calls, and on loopback the peer's TCP)."""
    try:
        return int(proc_stat(pid)[12]) / CLK_TCK
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def postgres_cpu_s(postmaster: int) -> float:
    """The server's CPU: the postmaster with the backends it reaped, and every backend alive now. A
    backend that ends between two readings moves from the second term to the first, whole."""
    total = cpu_s(postmaster, reaped=True)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if int(proc_stat(int(entry))[1]) == postmaster:
                    total += cpu_s(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                continue
    return total


def client_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def postmaster_pid(home: Path) -> int:
    return int((home / "pg" / "postmaster.pid").read_text().split()[0])


def machine(url: str) -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    meminfo = Path("/proc/meminfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    mem_kb = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    return {
        "cores": os.cpu_count(), "cpu": cpu, "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "load_before": os.getloadavg(), "python": platform.python_version(),
        "postgres": rows(url, "SHOW server_version")[0]["server_version"], "kernel": platform.release(),
    }  # fmt: skip


# ----- database helpers ------------------------------------------------------------------------------


def rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def create_database(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")


def counters(url: str, dbname: str) -> tuple[int, int]:
    """Committed transactions and top-level statements of the database so far (two statements)."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        commits = conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (dbname,)).fetchone()
        calls = conn.execute(
            "SELECT coalesce(sum(calls), 0)::bigint AS n FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = %s) AND toplevel",
            (dbname,),
        ).fetchone()
    assert commits is not None and calls is not None
    return int(commits["xact_commit"]), int(calls["n"])


def statement_calls(url: str, dbname: str) -> dict[str, int]:
    """Top-level statements of the database so far, by their text."""
    found = rows(url, "SELECT query, calls FROM pg_stat_statements WHERE toplevel AND dbid = "
                      "(SELECT oid FROM pg_database WHERE datname = %s)", dbname)  # fmt: skip
    out: dict[str, int] = {}
    for r in found:
        text = " ".join(str(r["query"]).split())
        out[text] = out.get(text, 0) + int(r["calls"])
    return out


def busiest(before: dict[str, int], after: dict[str, int], runs: int, top: int = 8) -> list[dict[str, Any]]:
    """The statements made most often in between, per run, each named by its first words."""
    grown = sorted(((n - before.get(q, 0), q) for q, n in after.items()), reverse=True)[:top]
    return [{"statement": q[:90], "per_run": round(n / runs, 2)} for n, q in grown if n > 0]


def create_token(env: dict[str, str], python: str | None = None) -> str:
    """An operator token made by the CLI (`python`: another release's interpreter, as bench/client.py's)."""
    cli = [python or sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", "bench", "--role", "operator"]
    return subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120, check=True).stdout.strip()


def base_env(home: Path, url: str, standins: Child) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    # The stand-ins keep their own records in a database of their own: not the one measured.
    env.update({k: v for k, v in standins.env.items() if k != "TICKETIQ_DATABASE_URL"})
    env.update({"TICKETIQ_DATABASE_URL": url, "TICKETIQ_HOME": str(home), "TICKETIQ_SEAL_KEYS": SEAL_KEYS,
                "TICKETIQ_LOG_LEVEL": "WARNING"})  # fmt: skip
    return env


SUBMIT_TRIES = 5
RESENT = [0]  # submissions sent again after a transport error, over the whole bench


async def submit(bases: list[str], token: str, texts: list[str], agent: str) -> list[str]:
    """POST every run at once, round-robin over the processes' APIs, `IN_FLIGHT` requests at a time
    (httpcore's pool costs the client CPU per queued request: a longer queue is kept here); return the
    run ids."""
    headers = {"Authorization": f"Bearer {token}"}
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    gate = asyncio.Semaphore(IN_FLIGHT)
    async with httpx.AsyncClient(timeout=120, limits=limits, headers=headers) as client:

        async def one(i: int, text: str) -> str:
            # As a client should: each run under its own Idempotency-Key, sent again with the same key when
            # the connection failed (a keep-alive connection the server closed as the request went out).
            key = {"Idempotency-Key": f"scale-{uuid.uuid4()}"}
            for tries in range(1, SUBMIT_TRIES + 1):
                try:
                    async with gate:
                        response = await client.post(f"{bases[i % len(bases)]}/v1/runs",
                                                     json={"agent": agent, "input": text}, headers=key)  # fmt: skip
                    break
                except httpx.TransportError:
                    if tries == SUBMIT_TRIES:
                        raise
                    RESENT[0] += 1
                    await asyncio.sleep(0.1 * tries)
            response.raise_for_status()
            return str(response.json()["id"])

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(texts))))


def wait_done(url: str, run_ids: list[str], timeout_s: float) -> tuple[int, int]:
    """Poll until every run ended; return (polls made, runs failed)."""
    deadline = time.monotonic() + timeout_s
    polls = 0
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        while True:
            polls += 1
            row = conn.execute(
                "SELECT count(*) FILTER (WHERE status = ANY(%s)) AS done, count(*) FILTER (WHERE status <> "
                "'succeeded' AND status = ANY(%s)) AS failed FROM runs WHERE id = ANY(%s::uuid[])",
                (list(TERMINAL), list(TERMINAL), run_ids),
            ).fetchone()
            assert row is not None
            if row["done"] == len(run_ids):
                return polls, int(row["failed"])
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {row['done']} of {len(run_ids)} runs ended in {timeout_s:.0f} s")
            time.sleep(0.1)


# ----- 1-3: throughput, statements, the limit -------------------------------------------------------


def limit_words(cpu: dict[str, Any]) -> str:
    wall, cores = cpu["wall_s"], cpu["cores"]
    shares = (f"Postgres {cpu['postgres_s'] / wall:.2f}, apps {cpu['apps_s'] / wall:.2f}, stand-ins "
              f"{cpu['standins_s'] / wall:.2f}, bench client {cpu['client_s'] / wall:.2f} cores")  # fmt: skip
    busiest_app = max(cpu["apps"]) / wall
    if cpu["busy_cores"] >= 0.85 * cores:
        top = max(("Postgres", cpu["postgres_s"]), ("the app processes", cpu["apps_s"]),
                  ("the stand-ins", cpu["standins_s"]), key=lambda kv: kv[1])[0]  # fmt: skip
        return (f"the machine's CPU saturates: {cpu['busy_cores']:.2f} of its {cores} cores busy ({shares}); "
                f"{top} use the most")  # fmt: skip
    if busiest_app >= 0.85:
        return f"one app process saturates its core ({busiest_app:.2f} of 1: one event loop); {shares}"
    return f"no CPU saturates ({cpu['busy_cores']:.2f} of {cores} cores busy: {shares}): waits bound it"


def throughput(
    server: embedded.EmbeddedServer, folder: Path, standins: Child, n: int, runs: int, profile: Path | None = None
) -> dict[str, Any]:
    dbname = f"scale_p{n}"
    create_database(server.url(), dbname)
    url = server.url(dbname)
    rows(url, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    env = base_env(folder / "home", url, standins)
    token = create_token(env)
    apps: list[Child] = []
    try:
        bases = []
        for i in range(n):
            child, base = start_serve(env, folder, name=f"p{n}-{i}")
            apps.append(child)
            bases.append(base)
        warm = asyncio.run(submit(bases, token, [f"Read OPS-{i}" for i in range(2 * n)], "reader"))
        wait_done(url, warm, 120)
        # A backend's transaction counts reach pg_stat_database up to STATS_LAG_S late: each reading of
        # them comes after that long, and the idle processes' own rate (heartbeats, renewals, looks for
        # runs given to them) over that long is measured first and taken off.
        time.sleep(STATS_LAG_S)
        idle0 = counters(url, dbname)
        time.sleep(STATS_LAG_S)
        commits0, calls0 = counters(url, dbname)
        idle_commits_per_s = (commits0 - idle0[0] - 3) / STATS_LAG_S
        each0 = statement_calls(url, dbname)
        postmaster = postmaster_pid(folder / "home")
        pg0, apps0 = postgres_cpu_s(postmaster), [cpu_s(a.pid) for a in apps]
        system0 = sum(system_s(a.pid) for a in apps)
        st0, client0 = cpu_s(standins.pid), client_cpu_s()
        started = rows(url, "SELECT clock_timestamp() AS t")[0]["t"]
        wall0 = time.monotonic()
        with contextlib.ExitStack() as sampling:
            sampler = None
            if profile is not None and n == 1:
                sampler = sampling.enter_context(Sampler(apps[0].pid, profile / f"scale-p{n}.raw"))
            ids = asyncio.run(submit(bases, token, [f"Read OPS-{1000 + i}" for i in range(runs)], "reader"))
            polls, failed = wait_done(url, ids, 600)
            wall = time.monotonic() - wall0
        pg1, apps1 = postgres_cpu_s(postmaster), [cpu_s(a.pid) for a in apps]
        system1 = sum(system_s(a.pid) for a in apps)
        st1, client1 = cpu_s(standins.pid), client_cpu_s()
        calls1 = counters(url, dbname)[1]  # pg_stat_statements counts at once
        each1 = statement_calls(url, dbname)
        last = rows(url, "SELECT max(finished_at) AS t FROM runs WHERE id = ANY(%s::uuid[])", ids)[0]["t"]
        done = time.monotonic()
        time.sleep(STATS_LAG_S)
        commits1 = counters(url, dbname)[0] - idle_commits_per_s * (time.monotonic() - done)
    finally:
        for child in apps:
            child.stop()
    seconds = (last - started).total_seconds()
    own = polls + 3  # this bench's polls and readings in the measured database while the runs ran
    per_app = [b - a for a, b in zip(apps0, apps1, strict=True)]
    cpu: dict[str, Any] = {
        "postgres_s": round(pg1 - pg0, 2), "apps_s": round(sum(per_app), 2), "apps": [round(x, 2) for x in per_app],
        "standins_s": round(st1 - st0, 2), "client_s": round(client1 - client0, 2), "wall_s": round(wall, 2),
        "cores": os.cpu_count() or 1,
    }  # fmt: skip
    cpu["busy_cores"] = round((cpu["postgres_s"] + cpu["apps_s"] + cpu["standins_s"] + cpu["client_s"]) / wall, 2)
    figures = {
        "processes": n, "runs": runs, "failed": failed, "seconds": round(seconds, 3),
        "runs_per_s": round(runs / seconds, 1),
        "commits_per_s": round((commits1 - commits0 - own - 6) / seconds, 1),
        "statements_per_s": round((calls1 - calls0 - own) / seconds, 1),
        "statements_per_run": round((calls1 - calls0 - own) / runs, 1),
        "commits_per_run": round((commits1 - commits0 - own - 6) / runs, 1),
        "app_cpu_ms_per_run": round(1000 * sum(per_app) / runs, 2),
        # The kernel's part: on loopback a send() also runs the receiving end's TCP stack.
        "app_system_ms_per_run": round(1000 * (system1 - system0) / runs, 2),
        "cpu": cpu, "limit": limit_words(cpu), "busiest_statements": busiest(each0, each1, runs),
    }  # fmt: skip
    print(f"  {n} process(es): {runs} runs in {seconds:.2f} s = {figures['runs_per_s']} runs/s, "
          f"{figures['commits_per_s']} commits/s, {figures['statements_per_s']} statements/s "
          f"({figures['statements_per_run']} a run){', FAILED ' + str(failed) if failed else ''}")  # fmt: skip
    print(f"    a run: {figures['app_cpu_ms_per_run']} ms of app CPU ({figures['app_system_ms_per_run']} ms of it in "
          f"the kernel), {figures['statements_per_run']} statements, "
          f"{figures['commits_per_run']} commits; {runs / sum(per_app):.1f} runs per app CPU second")  # fmt: skip
    print(
        f"    CPU over {wall:.2f} s: Postgres {cpu['postgres_s']} s, apps {cpu['apps_s']} s {cpu['apps']}, "
        f"stand-ins {cpu['standins_s']} s, client {cpu['client_s']} s: {cpu['busy_cores']} of {cpu['cores']} cores"
    )
    print(f"    limit: {figures['limit']}")
    for st in figures["busiest_statements"]:
        print(f"      {st['per_run']:5.2f} a run: {st['statement']}")
    if sampler is not None:
        found = summary(sampler.stacks())
        print_summary(found)
        figures["profile"] = {"samples": found.samples, "functions": found.functions, "packages": found.packages}
    return figures


# ----- 4: the sweep's statements -------------------------------------------------------------------------

LIVE = "bench-live"
LEADER = "bench-leader"


def sweep_statements() -> dict[str, dict[str, Any]]:
    """The leader's sweep statements (and every process's look for runs given to it) as the app calls them."""
    none: list[str] = []
    return {
        "claim_dead": {"q": "leader.claim_dead", "p": {"holder": LEADER, "ttl": 8.0, "driving": Jsonb(none)}},
        "claim_lapsed": {"q": "leader.claim_lapsed",
                         "p": {"holder": LEADER, "ttl": 8.0, "limit": 100, "driving": Jsonb(none)}},
        "orphaned_queued": {"q": "leader.orphaned_queued", "p": {"holder": LEADER, "grace": 5.0, "limit": 100}},
        "waiting_decided": {"q": "runs.waiting_decided", "p": {"holder": LEADER, "limit": 100}},
        "next_lapse_s": {"q": "leader.next_lapse", "p": {"holder": LEADER}},
        "due_schedules": {"q": "schedules.due", "p": {"now": None, "limit": 100}},
        "inbox_adoption": {"q": "teams.unstarted", "p": {"grace_s": 5.0, "limit": 100}},
        "take_up": {"q": "leases.take_up", "p": {"holder": LIVE, "ttl": 8.0, "driving": Jsonb(none)}},
    }  # fmt: skip


async def sweep_setup(url: str) -> psycopg.AsyncConnection[Any]:
    """Migrated; a live process (its mark held by the returned connection) driving 100 runs."""
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row)
    await migrate(conn)
    release = {"version": "bench", "commit": "bench", "state_format": 1, "seal_format": 2}  # what it knows
    await conn.execute(QUERIES["leader.register"], {"id": LIVE, "pid": os.getpid(), "host": "bench", **release})
    await conn.execute(
        "WITH r AS (INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status) "
        "SELECT gen_random_uuid(), 'reader', 'live', 'ops-bot', 'acme', 'api', false, 'c', 'running' "
        "FROM generate_series(1, 100) RETURNING id), c AS (INSERT INTO checkpoints (run_id, attempt, step, state, "
        "seal, key_id, sealed_attempt, sealed_losses) SELECT id, 1, 1, '{}', 's', 'k', 1, 0 FROM r) "
        "INSERT INTO leases (name, holder, expires_at) SELECT 'checkpoint:' || id, %s, now() + interval '1 day' FROM r",
        (LIVE,),
    )
    await conn.execute("ANALYZE")
    return conn


BIG = ("runs", "checkpoints", "approvals", "inputs", "schedule_fires", "teams_inbox", "processes")


async def seq_scans(url: str) -> dict[str, list[str]]:
    """For each sweep statement, the tables that fill with finished runs its plan reads whole."""
    out = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for name, st in sweep_statements().items():
            cur = await conn.execute("EXPLAIN " + QUERIES[st["q"]], st["p"])
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
            out[name] = [t for t in BIG if f"Seq Scan on {t} " in plan or plan.endswith(f"Seq Scan on {t}")]
    return out


async def time_statements(url: str, calls: int) -> dict[str, float]:
    out = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        for name, st in sweep_statements().items():
            samples = []
            for _ in range(calls + 3):
                started = time.perf_counter()
                cur = await conn.execute(QUERIES[st["q"]], st["p"])
                if cur.description:
                    await cur.fetchall()
                samples.append((time.perf_counter() - started) * 1000)
            out[name] = round(statistics.median(samples[3:]), 3)  # the first few plan and warm caches
    return out


async def sweep(server: embedded.EmbeddedServer, finished: int, calls: int) -> list[dict[str, Any]]:
    create_database(server.url(), "scale_sweep")
    url = server.url("scale_sweep")
    owner = await sweep_setup(url)
    try:
        empty = await time_statements(url, calls)
        print(f"    with 0 finished runs: {empty}")
        lists_empty = run_list_timing.report(await run_list_timing.time_lists(url, calls))
        took = await fill(url, finished)
        full = await time_statements(url, calls)
        print(f"    with {finished} finished runs (inserted in {took:.0f} s): {full}")
        scans = await seq_scans(url)
        print(f"    tables read whole by a plan: {({k: v for k, v in scans.items() if v}) or 'none'}")
        lists = run_list_timing.report(await run_list_timing.time_lists(url, calls),
                                       await run_list_timing.seq_scans(url))  # fmt: skip
    finally:
        await owner.close()
    return [{"finished_runs": 0, "statements": empty, "run_list": lists_empty},
            {"finished_runs": finished, "statements": full, "seq_scans": scans, "run_list": lists}]  # fmt: skip


def grows(sweeps: list[dict[str, Any]]) -> list[str]:
    """Statements at least twice as slow, and 0.5 ms slower, with the finished runs than without."""
    empty, full = sweeps[0]["statements"], sweeps[-1]["statements"]
    return [name for name in empty if full[name] >= 2 * empty[name] and full[name] - empty[name] >= 0.5]


# ----- 5: the spread ------------------------------------------------------------------------------------


def spread(server: embedded.EmbeddedServer, folder: Path, killed_runs: int) -> dict[str, Any]:
    create_database(server.url(), "scale_spread")
    url = server.url("scale_spread")
    standins = start_standins({**os.environ, "TICKETIQ_DATABASE_URL": server.url("scale_standins")},
                              folder / "slow", "--model-latency-ms", "1000")  # fmt: skip
    apps: dict[str, Child] = {}
    try:
        env = base_env(folder / "home", url, standins)
        token = create_token(env)
        bases = {}
        for name, lead in (("leader", "true"), ("worker", "false"), ("victim", "false")):
            apps[name], bases[name] = start_serve({**env, "TICKETIQ_LEAD": lead}, folder, name=f"spread-{name}")
        texts = [f"Read OPS-{5000 + i}" for i in range(killed_runs)]
        ids = asyncio.run(submit([bases["victim"]], token, texts, "reader"))
        deadline = time.monotonic() + 60
        while rows(url, "SELECT count(*) AS n FROM checkpoints WHERE run_id = ANY(%s::uuid[]) AND step >= 1",
                   ids)[0]["n"] < len(ids):  # fmt: skip
            if time.monotonic() > deadline:
                raise TimeoutError("the runs were not all in flight within 60 s")
            time.sleep(0.05)
        os.kill(apps["victim"].pid, signal.SIGKILL)
        killed_at = rows(url, "SELECT clock_timestamp() AS t")[0]["t"]
        wait_done(url, ids, 120)
        pid_name = {child.pid: name for name, child in apps.items()}
        resumed = rows(
            url,
            "SELECT a.at, p.pid FROM audit_log a JOIN processes p ON p.id = a.actor "
            "WHERE a.run_id = ANY(%s::uuid[]) AND a.action = 'agent.run.crash_resumed'",
            ids,
        )
        taken = Counter(pid_name.get(r["pid"], str(r["pid"])) for r in resumed)
        recovery: dict[str, list[float]] = {}
        for r in resumed:
            recovery.setdefault(pid_name.get(r["pid"], str(r["pid"])), []).append(
                round((r["at"] - killed_at).total_seconds(), 3)
            )
        losses = sorted({int(r["losses"]) for r in rows(
            url, "SELECT losses FROM checkpoints WHERE run_id = ANY(%s::uuid[])", ids)})  # fmt: skip
    finally:
        for child in apps.values():
            child.stop()
        standins.stop()
    figures = {"killed_runs": killed_runs, "taken": dict(taken), "recovery_s": recovery, "losses": losses}
    print(f"    {killed_runs} runs of a SIGKILLed process, resumed by: {dict(taken)} (losses {losses})")
    for name, seconds in sorted(recovery.items()):
        print(
            f"      {name}: resumed {statistics.median(seconds):.2f} s after the kill (median), "
            f"{max(seconds):.2f} s at most"
        )
    return figures


# ----- main --------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--processes", default="1,2,4", help="process counts, comma separated")
    parser.add_argument("--finished", type=int, default=1_000_000, help="finished runs for the sweep's timing")
    parser.add_argument("--killed-runs", type=int, default=20, help="runs in flight on the process killed")
    parser.add_argument("--sweep-calls", type=int, default=50, help="round trips per sweep statement timed")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    parser.add_argument("--parts", default="throughput,sweep,spread", help="which parts run, comma separated")
    parser.add_argument("--profile", type=Path, help="py-spy the 1-process case; raw stacks kept in this folder")
    args = parser.parse_args()
    parts = {x.strip() for x in args.parts.split(",")}
    counts = [int(x) for x in args.processes.split(",") if x.strip()]
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="ticketiq-scale-") as tmp:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        standins: Child | None = None
        try:
            figures["machine"] = machine(server.url())
            print(f"machine: {figures['machine']}")
            create_database(server.url(), "scale_standins")
            standins = start_standins({**os.environ, "TICKETIQ_DATABASE_URL": server.url("scale_standins")},
                                      folder, "--model-latency-ms", "0")  # fmt: skip
            if "throughput" in parts:
                print(f"1-3. throughput of the reader agent, {args.runs} runs submitted at once, model latency 0:")
                figures["throughput"] = [throughput(server, folder, standins, n, args.runs, args.profile)
                                         for n in counts]  # fmt: skip
            standins.stop()
            standins = None
            if "sweep" in parts:
                print(f"4. the leader's sweep statements, median of {args.sweep_calls} round trips (ms):")
                figures["sweep"] = asyncio.run(sweep(server, args.finished, args.sweep_calls))
                figures["sweep_grows"] = grows(figures["sweep"])
                print(f"    grows with the finished runs: {figures['sweep_grows'] or 'none'}")
            if "spread" in parts:
                print("5. the spread, three processes up:")
                figures["spread"] = spread(server, folder, args.killed_runs)
        finally:
            if standins is not None:
                standins.stop()
            embedded.stop(server.home)
    figures["submissions_sent_again"] = RESENT[0]
    print(f"submissions sent again (same Idempotency-Key) after a transport error: {RESENT[0]}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
