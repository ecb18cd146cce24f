"""The run list (`GET /v1/runs`) over the large history (`history.py`): each filter's page timed as the
app reads it (`RunListStore.page`: its transaction, planned for the values given, on a pooled connection
whose statements psycopg prepares after their fifth run), and the counts by status. `EXPLAIN` of each
names the tables a plan reads whole."""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from ticketiq.storage.database import Database
from ticketiq.storage.queries import QUERIES
from ticketiq.storage.run_list_store import RunListStore
from ticketiq.views import run_list
from ticketiq.views.run_list import Position, RunQuery, encode_cursor


def cases(now: datetime) -> dict[str, tuple[RunQuery, str | None]]:
    """Each filter alone, a few together, a caller's scope, and a page deep into the history."""
    deep = encode_cursor(Position(now - timedelta(days=6), "ffffffff-ffff-ffff-ffff-ffffffffffff"))
    return {
        "newest": (RunQuery(), None),
        "deep_page": (RunQuery(cursor=deep), None),
        "status_failed": (RunQuery(statuses=("failed",)), None),
        "status_stopped": (RunQuery(statuses=("stopped",)), None),
        "status_live": (RunQuery(statuses=("running", "waiting")), None),
        "agent": (RunQuery(agent="writer"), None),
        "channel": (RunQuery(channel="teams"), None),
        "created_by_rare": (RunQuery(created_by="carol"), None),
        "caller_scope": (RunQuery(), "ana"),
        "caller_failed": (RunQuery(statuses=("failed",)), "ana"),
        "since_until": (RunQuery(since=now - timedelta(days=3), until=now - timedelta(days=2)), None),
        "agent_channel_status": (RunQuery(statuses=("failed",), agent="triage", channel="api"), None),
        "q_rare": (RunQuery(q="OPS-777777"), None),
        "q_one_in_100": (RunQuery(q="outage"), None),
        "q_everywhere": (RunQuery(q="read"), None),
        "q_and_status": (RunQuery(q="outage", statuses=("failed",)), None),
        "limit_500": (RunQuery(limit=500), None),
    }


async def time_lists(url: str, calls: int) -> dict[str, float]:
    """Median ms of `calls` pages per case (after three that plan and warm caches), and of the counts."""
    now = datetime.now(UTC)
    out: dict[str, float] = {}
    db = Database(url, min_size=1, max_size=1)
    await db.open()
    try:
        store = RunListStore(db)
        for name, (query, scope) in cases(now).items():
            params = run_list.params(query, scope)
            samples = []
            for _ in range(calls + 3):
                started = time.perf_counter()
                rows = await store.page(params)
                run_list.page(rows, query)
                samples.append((time.perf_counter() - started) * 1000)
            out[name] = round(statistics.median(samples[3:]), 3)
        for name, scope in (("counts", None), ("counts_caller", "carol")):
            samples = []
            for _ in range(min(calls, 10) + 1):
                started = time.perf_counter()
                await store.counts(scope)
                samples.append((time.perf_counter() - started) * 1000)
            out[name] = round(statistics.median(samples[1:]), 3)
    finally:
        await db.close()
    return out


BIG = ("runs", "checkpoints", "inputs", "approvals")


async def seq_scans(url: str) -> dict[str, list[str]]:
    """For each case, the tables its plan (planned for its values) reads whole."""
    out: dict[str, list[str]] = {}
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for name, (query, scope) in cases(datetime.now(UTC)).items():
            cur = await conn.execute("EXPLAIN " + QUERIES["run_list.page"], run_list.params(query, scope))
            plan = "\n".join(str(r[0]) for r in await cur.fetchall())
            out[name] = [t for t in BIG if f"Seq Scan on {t} " in plan or plan.endswith(f"Seq Scan on {t}")]
    return out


def report(lists: dict[str, float], scans: dict[str, list[str]] | None = None) -> dict[str, Any]:
    slowest = max(lists, key=lambda name: lists[name] if not name.startswith("counts") else 0.0)
    print(f"    the run list (GET /v1/runs), median ms a page: {lists}")
    print(f"      slowest page: {slowest} {lists[slowest]} ms (the budget: 50 ms)")
    if scans is not None:
        print(f"      tables read whole by a plan: {({k: v for k, v in scans.items() if v}) or 'none'}")
    return {"pages_ms": lists, "slowest": slowest, **({"seq_scans": scans} if scans is not None else {})}
