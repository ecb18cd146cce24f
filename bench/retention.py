"""Retention (issue 34): how fast the pass purges a million ended runs, and what it costs the runs in flight.

    .venv/bin/python bench/retention.py [--runs 1000000] [--in-flight 32] [--seconds 20] [--batch 1000]
                                        [--rest-share 1.0] [--json PATH]

On an embedded Postgres of its own (a temporary home; fsync and synchronous_commit on, as the app runs it):

1. `--runs` ended runs, each with the rows a finished `reader` run leaves (a checkpoint, 3 calls, 3
   transcript rows, 2 audit rows, a kept answer, an attempt: 12 rows), made with generate_series
   (tests/support/ended_runs.py), ended an hour ago; then ANALYZE.
2. `--in-flight` runs in flight, each written by its own connection in a loop with the statement each step
   of a run writes (`runs.write_checkpoint`, one sealed checkpoint and its transcript entries, fenced by its
   attempt), for `--seconds` without a purge: the p50 and p99 of that statement.
3. The same writers while a retention pass (leader/retention.py, batches of `--batch`, a policy of a
   minute, resting `--rest-share` of each batch's time after it, as the app does) purges the million: the
   statement's p50 and p99 meanwhile, and the pass's rows deleted per second (every row of every table it
   deleted, over the pass's own time, rests included).

It prints figures and asserts none; the goals (issue 34): the purge at 10,000 rows/s or more, and the p99
of a step's statement moved by less than 1.5x, side by side in this one run. The machine's cores are
printed beside every figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.ended_runs import fill

from ticketiq.dbserver import embedded
from ticketiq.leader.retention import REST_SHARE, RetentionPass
from ticketiq.storage.database import Database
from ticketiq.storage.migrate import migrate
from ticketiq.storage.queries import QUERIES
from ticketiq.values import retention
from ticketiq.values.retention import Policy

DBNAME = "retention_bench"


def create_database(admin_url: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DBNAME} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {DBNAME}")


async def in_flight(url: str, n: int) -> list[str]:
    """`n` running runs, each with its checkpoint under attempt 1."""
    ids = [str(uuid.uuid4()) for _ in range(n)]
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for run_id in ids:
            await conn.execute(
                "WITH r AS (INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, "
                "status, started_at) VALUES (%s, 'reader', 'live', 'ops-bot', 'acme', 'api', false, 'c', 'running', "
                "now()) RETURNING id) INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, "
                "sealed_attempt, sealed_losses) SELECT id, 1, 0, '{}', 's', 'k', 1, 0 FROM r",
                (run_id,),
            )
    return ids


async def writer(
    url: str, run_id: str, stop: asyncio.Event, phase: list[str], samples: list[tuple[str, float]]
) -> None:
    """One run in flight: its step statement again and again, each timed and tagged with the phase it began in."""
    query = QUERIES["runs.write_checkpoint"]
    step = 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0) as conn:
        while not stop.is_set():
            step += 1
            params = {"run_id": run_id, "attempt": 1, "step": step, "state": '{"messages": []}' + " " * 600,
                      "seal": "s" * 64, "key_id": "k", "prev_seal": "p" * 64, "losses": 0, "state_format": 1,
                      "seal_format": 2, "finished": Jsonb([]), "opening": False,
                      "entries": Jsonb([{"kind": "model", "text": "read"}])}  # fmt: skip
            began = phase[0]
            started = time.perf_counter()
            await conn.execute(query, params)
            took = (time.perf_counter() - started) * 1000
            if began == phase[0]:  # a statement that straddled a change of phase is left out
                samples.append((began, took))


def quantiles(samples: list[float]) -> dict[str, float]:
    if len(samples) < 2:
        return {"n": len(samples), "p50_ms": float("nan"), "p99_ms": float("nan")}
    cuts = statistics.quantiles(samples, n=100)
    return {"n": len(samples), "p50_ms": round(statistics.median(samples), 3), "p99_ms": round(cuts[98], 3)}


async def measure(url: str, runs: int, flying: int, seconds: float, batch: int, rest: float) -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=dict_row) as conn:
        await migrate(conn)
    started = time.monotonic()
    await fill(url, runs, ago_s=3600)
    made_s = time.monotonic() - started
    print(f"    made {runs:,} ended runs ({runs * 12:,} rows) in {made_s:.0f} s")
    ids = await in_flight(url, flying)
    stop = asyncio.Event()
    phase = ["warm-up"]
    samples: list[tuple[str, float]] = []
    writers = [asyncio.create_task(writer(url, run_id, stop, phase, samples)) for run_id in ids]
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    try:
        await asyncio.sleep(2)  # connections up, statements prepared
        phase[0] = "alone"
        await asyncio.sleep(seconds)
        phase[0] = "during"
        pass_started = time.monotonic()
        policy = Policy(runs_s=60, audit_s=0, jobs_s=0, keys_s=86400, batch=batch)
        report = await RetentionPass(db, policy, "bench", rest_share=rest).run()
        pass_s = time.monotonic() - pass_started
        phase[0] = "after"
    finally:
        stop.set()
        await asyncio.gather(*writers)
        await db.close()
    alone = [ms for p, ms in samples if p == "alone"]
    during = [ms for p, ms in samples if p == "during"]
    # Rows deleted: not the audit rows unlinked nor the signed claims marked (those are updated, and kept).
    deleted = retention.rows_deleted(report.deleted)
    return {
        "ended_runs": runs, "rows_made_s": round(made_s, 1), "in_flight": flying, "batch": batch, "rest_share": rest,
        "pass_s": round(pass_s, 2), "rows_deleted": deleted, "runs_deleted": report.deleted.get("runs", 0),
        "rows_per_s": round(deleted / pass_s), "deleted": report.deleted,
        "step_statement": {"without_purge": quantiles(alone), "during_purge": quantiles(during)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--in-flight", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument(
        "--rest-share",
        type=float,
        default=REST_SHARE,
        help="the pass rests this share of each batch's time after it (the app's default)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    cores = os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="ticketiq-retention-") as tmp:
        server = embedded.acquire(Path(tmp) / "home")
        try:
            create_database(server.url())
            print(f"retention bench: {args.runs:,} ended runs, {args.in_flight} runs in flight, {cores} cores")
            figures = asyncio.run(
                measure(server.url(DBNAME), args.runs, args.in_flight, args.seconds, args.batch, args.rest_share)
            )
        finally:
            embedded.stop(server.home)
    alone, during = figures["step_statement"]["without_purge"], figures["step_statement"]["during_purge"]
    figures["cores"] = cores
    figures["p99_ratio"] = round(during["p99_ms"] / alone["p99_ms"], 2) if alone["p99_ms"] else None
    print(f"    the pass: {figures['rows_deleted']:,} rows ({figures['runs_deleted']:,} runs) in "
          f"{figures['pass_s']} s: "
          f"{figures['rows_per_s']:,} rows/s (goal 10,000 or more), {cores} cores")  # fmt: skip
    print(f"    a step's checkpoint statement, {args.in_flight} runs in flight: without the purge p50 "
          f"{alone['p50_ms']} ms p99 {alone['p99_ms']} ms ({alone['n']:,} statements); during it p50 "
          f"{during['p50_ms']} ms p99 {during['p99_ms']} ms ({during['n']:,}); p99 x{figures['p99_ratio']} "
          f"(goal under 1.5), {cores} cores")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
