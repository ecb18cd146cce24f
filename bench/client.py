"""The client's side of a run (issue 35): runs driven the way a user's client drives them, the app's CPU a
run, the requests a run and how soon a finished run's answer reaches the client, beside an earlier
release driven by a polling client, and beside bench/scale.py's own figure, all in one run.

    make bench-client
    .venv/bin/python bench/client.py [--runs 300] [--in-flight 32] [--baseline d7c25d5] [--rounds 2]
                                     [--poll-s 0.25] [--wait-s 30] [--warmup 10] [--idle-s 2] [--current-poll]
                                     [--no-scale] [--profile DIR] [--json PATH]

Everything runs for real, as in bench/scale.py (whose helpers this imports): an embedded Postgres in a
temporary home, and for each side its own stand-ins (model latency 0) and one `ticketiq serve` process,
each side on a fresh database and a home of its own, with the same settings. Two sides:

- **baseline**: the commit `--baseline` (default d7c25d5, which has no `wait`), run from a git worktree
  with a venv of its own (`baseline.py`: made once, then reused from a cache folder outside the
  repository). Its client polls: POST /v1/runs, then `GET /v1/runs/{id}` every `--poll-s` seconds (the
  sleep first) until the run ended.
- **current**: this tree. Its client waits: POST /v1/runs, then `GET /v1/runs/{id}?wait=S` (`--wait-s`),
  again if it came back before the run ended (the wait's S passed), or after its Retry-After when the
  process refused the wait (too many waiting). `--current-poll` adds a third side: this tree, polled,
  which splits what the wait saves from what the code saves.

A round measures each side once, baseline first (`--rounds 2` is ABAB, so drift and noise show). A side's
round: `--warmup` runs first (not counted: the first requests import and compile), then the process idle
for `--idle-s` (its CPU then, per second, is what its loops cost with no run: heartbeats, renewals, the
leader's sweep; a side that takes longer pays more of it a run), then `--runs` runs of the `reader` agent,
`--in-flight` of them at once (each of that many client tasks takes the next run and follows it to its
end), one HTTP connection a task. Per side and round:

- the app process's CPU a run: utime + stime of the `ticketiq serve` process from /proc, over the
  counted runs, divided by them; beside it Postgres's (every database of the server: the stand-ins
  record there too) and this bench's own;
- the requests a run, counted in the client: POSTs, GETs, waits refused, requests sent again after a
  transport error;
- the wake-up latency, p50 and p99 over the runs: from the run's `finished_at` as the API answers it to
  the moment that answer was read in the client (`time.time()` after the body). `finished_at` is the
  database's `now()` of the transaction that ended the run, so the latency also holds the rest of that
  transaction to its commit. The clocks compare: Postgres runs on this machine, and its `now()` and
  Python's `time.time()` both read the same system wall clock (CLOCK_REALTIME).

The table gives each side's figures and, per round and over all rounds, current's app CPU a run over
the baseline's (the issue's goal: at most 0.55x). Then `bench/scale.py --processes 1 --parts throughput
--runs N` for this tree, run in the same process on the same Postgres (its own database, stand-ins and
output; `--no-scale` leaves it out). It prints figures and asserts none.

Both sides run with the server's default settings. A wait is bounded by TICKETIQ_MAX_WAITERS alone, not
by the event streams' per-principal cap (entries/run_wait.py), so one token waits for all its runs in
flight; `--principal-cap N` sets TICKETIQ_MAX_STREAMS_PER_PRINCIPAL on both sides all the same.

`--profile DIR`: one more round first, not counted, in which py-spy samples each side's process while its
runs go (from outside: it does not pause it, but its sampling takes CPU the others then lack, so the
counted rounds run without it); raw stacks kept in DIR, and each side's top ten functions by own time
are printed (`profile_app.py`), with the app CPU a run that round.

`--json PATH` writes every figure as one JSON object:

    {"machine": {...scale.py's, "affinity": [cpus this bench may use]},
     "settings": {"runs", "in_flight", "poll_s", "wait_s", "warmup", "idle_s", "rounds", "principal_cap"},
     "baseline": {"rev", "commit"}, "current": {"commit", "changed_files"},
     "rounds": [{"round": r, "sides": {side: {"runs", "succeeded", "statuses", "wall_s", "runs_per_s",
                 "app_cpu_ms_per_run", "app_idle_ms_per_s", "postgres_cpu_ms_per_run", "client_cpu_ms_per_run",
                 "posts", "gets", "gets_per_run", "requests_per_run", "refused_waits", "sent_again",
                 "wake_ms": {"p50", "p99", "max"}}}, "ratio": current over baseline}],
     "ratio": over all rounds, "scale": scale.py's throughput figures (1 process),
     "profile": {side: {"app_cpu_ms_per_run", "samples", "functions", "packages", "through"}}}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))

import scale
from baseline import Baseline, git, prepare
from profile_app import Sampler, Summary, print_summary, summary
from ticketiq.dbserver import embedded
from ticketiq.operate.launch import Child, start_serve, start_standins

REPO = Path(__file__).resolve().parents[1]
ENDED = (*scale.TERMINAL, "waiting")  # a wait also ends on `waiting` (the reader never waits)
SEND_TRIES = 5
GOAL = 0.55  # issue 35: current's app CPU a run at most this share of the baseline's


# ----- the client ------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the client sent and saw while it drove a batch of runs."""

    posts: int = 0
    gets: int = 0
    refused: int = 0  # waits answered at once with Retry-After: too many waiting
    sent_again: int = 0  # requests sent again after a transport error
    statuses: Counter[str] = field(default_factory=Counter)
    wake_ms: list[float] = field(default_factory=list)

    def ended(self, shown: dict[str, Any], arrived: float) -> None:
        self.statuses[str(shown["status"])] += 1
        if shown.get("finished_at"):
            finished = datetime.fromisoformat(str(shown["finished_at"])).timestamp()
            self.wake_ms.append(1000 * (arrived - finished))


async def send(tally: Tally, request: Callable[[], Awaitable[httpx.Response]]) -> httpx.Response:
    """A request, sent again on a transport error (a keep-alive connection the server closed as it went)."""
    for tries in range(1, SEND_TRIES + 1):
        try:
            response = await request()
            break
        except httpx.TransportError:
            if tries == SEND_TRIES:
                raise
            tally.sent_again += 1
            await asyncio.sleep(0.1 * tries)
    response.raise_for_status()
    return response


async def follow_run(client: httpx.AsyncClient, tally: Tally, text: str, wait_s: float | None, poll_s: float) -> None:
    """One run as a user's client drives it: POST, then a wait (`wait_s`) or a poll every `poll_s` until it ended."""
    key = {"Idempotency-Key": f"client-{uuid.uuid4()}"}  # kept across its sends again
    tally.posts += 1
    created = await send(tally, lambda: client.post("/v1/runs", json={"agent": "reader", "input": text}, headers=key))
    path = f"/v1/runs/{created.json()['id']}"
    params = {"wait": f"{wait_s:g}"} if wait_s else None
    while True:
        if not wait_s:
            await asyncio.sleep(poll_s)
        tally.gets += 1
        answer = await send(tally, lambda: client.get(path, params=params))
        arrived = time.time()
        shown = answer.json()
        if shown["status"] in ENDED:
            tally.ended(shown, arrived)
            return
        after = answer.headers.get("Retry-After")
        if wait_s and after is not None:
            tally.refused += 1
            await asyncio.sleep(float(after))


async def drive(base: str, token: str, texts: list[str], in_flight: int, wait_s: float | None, poll_s: float) -> Tally:
    """`texts` as runs, `in_flight` at once: each task takes the next run and follows it to its end."""
    tally = Tally()
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    timeout = httpx.Timeout(60.0 + (wait_s or 0.0))
    headers = {"Authorization": f"Bearer {token}"}
    queue = iter(texts)  # shared by the tasks: one event loop, so no two take the same text
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits, headers=headers) as client:

        async def task() -> None:
            for text in queue:
                await follow_run(client, tally, text, wait_s, poll_s)

        await asyncio.gather(*(task() for _ in range(in_flight)))
    return tally


# ----- a side and its round ---------------------------------------------------------------------------------


@dataclass
class Side:
    name: str  # the key in the table and the JSON
    label: str
    wait_s: float | None  # None: the client polls
    release: Baseline | None  # None: this tree
    standins: Child | None = None
    extra: dict[str, str] = field(default_factory=dict)  # settings of this side's app process only

    @property
    def python(self) -> str | None:
        return None if self.release is None else str(self.release.python)

    def env(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, **self.extra} if self.release is None else self.release.env({**env, **self.extra})


def percentile(values: list[float], pct: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[pct - 1], 1)


def measure(
    side: Side, server: embedded.EmbeddedServer, folder: Path, round_: int, args: argparse.Namespace,
    profile: Path | None,
) -> dict[str, Any]:  # fmt: skip
    """One side's round: a fresh database and process, the warm-up, then the counted runs."""
    tag = f"{side.name}_r{round_}"
    scale.create_database(server.url(), f"client_{tag}")
    url = server.url(f"client_{tag}")
    assert side.standins is not None
    env = side.env(scale.base_env(folder / f"home-{tag}", url, side.standins))
    if args.principal_cap:
        env["TICKETIQ_MAX_STREAMS_PER_PRINCIPAL"] = str(args.principal_cap)
    token = scale.create_token(env, side.python)
    child, base = start_serve(env, folder, name=f"serve-{tag}", python=side.python)
    postmaster = scale.postmaster_pid(folder / "home")
    figures: dict[str, Any] = {}
    try:
        warm = [f"Read OPS-{i}" for i in range(args.warmup)]
        asyncio.run(drive(base, token, warm, args.in_flight, side.wait_s, args.poll_s))
        idle0 = scale.cpu_s(child.pid)
        time.sleep(args.idle_s)
        idle_ms_per_s = 1000 * (scale.cpu_s(child.pid) - idle0) / args.idle_s if args.idle_s > 0 else None
        texts = [f"Read OPS-{1000 + i}" for i in range(args.runs)]
        with contextlib.ExitStack() as sampling:
            sampler = None
            if profile is not None:
                sampler = sampling.enter_context(Sampler(child.pid, profile / f"client-{tag}.raw"))
            app0, pg0, client0 = scale.cpu_s(child.pid), scale.postgres_cpu_s(postmaster), scale.client_cpu_s()
            wall0 = time.monotonic()
            tally = asyncio.run(drive(base, token, texts, args.in_flight, side.wait_s, args.poll_s))
            wall = time.monotonic() - wall0
            app1, pg1, client1 = scale.cpu_s(child.pid), scale.postgres_cpu_s(postmaster), scale.client_cpu_s()
        if sampler is not None:
            found = summary(sampler.stacks())
            figures["profile"] = dataclasses.asdict(found)
    finally:
        child.stop()
    runs = args.runs
    figures.update({
        "runs": runs, "succeeded": tally.statuses.get("succeeded", 0), "statuses": dict(tally.statuses),
        "wall_s": round(wall, 2), "runs_per_s": round(runs / wall, 1),
        "app_cpu_ms_per_run": round(1000 * (app1 - app0) / runs, 2),
        "app_idle_ms_per_s": None if idle_ms_per_s is None else round(idle_ms_per_s, 2),
        "postgres_cpu_ms_per_run": round(1000 * (pg1 - pg0) / runs, 2),
        "client_cpu_ms_per_run": round(1000 * (client1 - client0) / runs, 2),
        "posts": tally.posts, "gets": tally.gets, "gets_per_run": round(tally.gets / runs, 2),
        "requests_per_run": round((tally.posts + tally.gets + tally.sent_again) / runs, 2),
        "refused_waits": tally.refused, "sent_again": tally.sent_again,
        "wake_ms": {"p50": percentile(tally.wake_ms, 50), "p99": percentile(tally.wake_ms, 99),
                    "max": round(max(tally.wake_ms), 1) if tally.wake_ms else None},
    })  # fmt: skip
    return figures


# ----- the table ----------------------------------------------------------------------------------------------

COLUMNS = (
    ("round", 5), ("side", 30), ("ok", 7), ("runs/s", 7), ("app ms/run", 10), ("idle ms/s", 9), ("pg ms/run", 9),
    ("GET/run", 7), ("req/run", 7), ("refused", 7), ("wake p50", 8), ("wake p99", 8),
)  # fmt: skip


def row(cells: list[str]) -> str:
    return "  ".join(
        c.rjust(w) if i != 1 else c.ljust(w) for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS, strict=True))
    )


def side_row(round_: int, side: Side, f: dict[str, Any]) -> str:
    wake = f["wake_ms"]
    return row([str(round_), side.label, f"{f['succeeded']}/{f['runs']}", f"{f['runs_per_s']}",
                f"{f['app_cpu_ms_per_run']}", f"{f['app_idle_ms_per_s']}", f"{f['postgres_cpu_ms_per_run']}",
                f"{f['gets_per_run']}",
                f"{f['requests_per_run']}", str(f["refused_waits"]), f"{wake['p50']}", f"{wake['p99']}"])  # fmt: skip


def ratio(rounds: list[dict[str, Any]]) -> float:
    """current's app CPU over the baseline's, summed over the rounds given (each the same number of runs)."""
    base: float = sum(r["sides"]["baseline"]["app_cpu_ms_per_run"] for r in rounds)
    current: float = sum(r["sides"]["current"]["app_cpu_ms_per_run"] for r in rounds)
    return round(current / base, 3)


def print_table(sides: list[Side], figures: dict[str, Any]) -> None:
    print()
    print(row([name for name, _ in COLUMNS]))
    for r in figures["rounds"]:
        for side in sides:
            print(side_row(r["round"], side, r["sides"][side.name]))
    each = ", ".join(f"round {r['round']} {r['ratio']}x" for r in figures["rounds"])
    print(f"app CPU a run, current over baseline: {each}; over all rounds {figures['ratio']}x (goal: at most {GOAL}x)")
    print("(ms/run: app and Postgres CPU a run; idle ms/s: the app's CPU a second with no run; wake: finished_at "
          "to the answer read, ms; refused: waits answered with Retry-After)")  # fmt: skip


# ----- main ---------------------------------------------------------------------------------------------------


def tree_state() -> dict[str, Any]:
    changed = [line[3:] for line in git(REPO, "status", "--porcelain").splitlines() if line.strip()]
    return {"commit": git(REPO, "rev-parse", "HEAD"), "changed_files": changed}


def start_standins_of(side: Side, server: embedded.EmbeddedServer, folder: Path) -> None:
    """The side's own stand-ins (model latency 0), keeping their records in a database of their own."""
    scale.create_database(server.url(), f"client_standins_{side.name}")
    env = side.env({**os.environ, "TICKETIQ_DATABASE_URL": server.url(f"client_standins_{side.name}")})
    side.standins = start_standins(env, folder / f"standins-{side.name}", "--model-latency-ms", "0",
                                   python=side.python)  # fmt: skip


def one_round(
    r: int, sides: list[Side], server: embedded.EmbeddedServer, folder: Path, args: argparse.Namespace,
    profile: Path | None = None,
) -> dict[str, Any]:  # fmt: skip
    measured: dict[str, Any] = {}
    for side in sides:
        print(f"round {r}: {side.label}, {args.runs} runs, {args.in_flight} in flight ...", flush=True)
        measured[side.name] = measure(side, server, folder, r, args, profile)
        print("  " + side_row(r, side, measured[side.name]), flush=True)
    return {"round": r, "sides": measured, "ratio": ratio([{"sides": measured}])}


def profiled(sides: list[Side], profiling: dict[str, Any], folder: Path) -> dict[str, Any]:
    """Each side's profile of the uncounted round 0, printed; returned for the JSON."""
    found: dict[str, Any] = {}
    for side in sides:
        measured = profiling["sides"][side.name]
        found[side.name] = {"app_cpu_ms_per_run": measured["app_cpu_ms_per_run"], **measured["profile"]}
        print(f"profile of {side.label}, round 0 (not counted; {measured['app_cpu_ms_per_run']} ms of app CPU a "
              f"run under py-spy; raw stacks in {folder}):")  # fmt: skip
        print_summary(Summary(**measured["profile"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=300, help="counted runs a side and round")
    parser.add_argument("--in-flight", type=int, default=32, help="runs the client has going at once")
    parser.add_argument("--baseline", default="d7c25d5", help="the earlier commit, polled (default d7c25d5)")
    parser.add_argument("--rounds", type=int, default=2, help="each side once a round, baseline first (ABAB)")
    parser.add_argument("--poll-s", type=float, default=0.25, help="the polling client's interval")
    parser.add_argument("--wait-s", type=float, default=30.0, help="the waiting client's `wait`")
    parser.add_argument("--warmup", type=int, default=10, help="runs driven before each side's counted ones")
    parser.add_argument("--idle-s", type=float, default=2.0, help="the app's idle CPU read over this long")
    parser.add_argument(
        "--principal-cap",
        type=int,
        default=0,
        help="TICKETIQ_MAX_STREAMS_PER_PRINCIPAL for both sides (0, the default, leaves the server's own)",
    )
    parser.add_argument("--current-poll", action="store_true", help="also this tree with the polling client")
    parser.add_argument("--no-scale", action="store_true", help="leave out bench/scale.py's throughput figure")
    parser.add_argument("--profile", type=Path, help="a round 0 with py-spy on each side; raw stacks kept here")
    parser.add_argument("--json", type=Path, help="also write every figure to this file")
    args = parser.parse_args()
    release = prepare(REPO, args.baseline)
    sides = [Side("baseline", f"{args.baseline} polled {args.poll_s:g} s", None, release),
             Side("current", f"current, wait={args.wait_s:g}", args.wait_s, None)]  # fmt: skip
    if args.current_poll:
        sides.append(Side("current_polled", f"current polled {args.poll_s:g} s", None, None))
    figures: dict[str, Any] = {
        "settings": {"runs": args.runs, "in_flight": args.in_flight, "poll_s": args.poll_s, "wait_s": args.wait_s,
                     "warmup": args.warmup, "idle_s": args.idle_s, "rounds": args.rounds,
                     "principal_cap": args.principal_cap},
        "baseline": {"rev": args.baseline, "commit": release.commit}, "current": tree_state(),
    }  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ticketiq-client-") as tmp:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        try:
            figures["machine"] = {**scale.machine(server.url()), "affinity": sorted(os.sched_getaffinity(0))}
            print(f"machine: {figures['machine']}")
            print(
                f"baseline {args.baseline}: {release.commit[:12]}, from {release.tree}; current: {figures['current']}"
            )
            for side in sides:
                start_standins_of(side, server, folder)
            if args.profile:
                print("round 0, profiled with py-spy, not counted:")
                profiling = one_round(0, sides, server, folder, args, args.profile)
            figures["rounds"] = [one_round(r, sides, server, folder, args) for r in range(1, args.rounds + 1)]
            figures["ratio"] = ratio(figures["rounds"])
            if not args.no_scale:
                current = next(s for s in sides if s.name == "current")
                assert current.standins is not None
                print(f"bench/scale.py --processes 1 --parts throughput --runs {args.runs}, this tree:", flush=True)
                figures["scale"] = scale.throughput(server, folder, current.standins, 1, args.runs)
        finally:
            for side in sides:
                if side.standins is not None:
                    side.standins.stop()
            embedded.stop(server.home)
    print_table(sides, figures)
    if "scale" in figures:
        s = figures["scale"]
        print(
            f"beside it, bench/scale.py --processes 1 --parts throughput --runs {args.runs} (this tree; its client "
            f"polls the database): {s['app_cpu_ms_per_run']} ms of app CPU a run, {s['runs_per_s']} runs/s"
        )
    if args.profile:
        figures["profile"] = profiled(sides, profiling, args.profile)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
