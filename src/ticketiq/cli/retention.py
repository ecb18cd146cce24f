"""`ticketiq retention run [--dry-run]` and `ticketiq retention status [--json]` (issue 34): one retention
pass now, on the database the settings name (any process may run it beside the leader's: the pass is safe
twice at once), and what each table holds, what is due and what the last pass did."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ticketiq.settings import Duration, Settings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p_retention = sub.add_parser("retention", help="the data retention policy: run a pass now, or show its status")
    actions = p_retention.add_subparsers(dest="action", required=True)
    p_run = actions.add_parser("run", help="purge what the policies make due now; prints per table what went")
    p_run.add_argument("--dry-run", action="store_true", help="print what a pass would delete, and delete nothing")
    p_status = actions.add_parser("status", help="per table: rows, oldest row, rows due now; the last pass")
    p_status.add_argument("--json", action="store_true", help="print one JSON object")


def command(settings: Settings, args: argparse.Namespace) -> int:
    from ticketiq.dbserver.target import resolve

    target = resolve(settings)
    try:
        act = _run if args.action == "run" else _status
        return asyncio.run(act(settings, target.url, args))
    finally:
        target.release()


@asynccontextmanager
async def _opened(settings: Settings, url: str) -> AsyncIterator[Any]:
    from ticketiq.storage import database
    from ticketiq.storage.migrate import migrate_pooled

    db = database.Database(url, min_size=1, max_size=2, limits=database.ConnectionLimits.from_settings(settings))
    await db.open()
    try:
        await migrate_pooled(db)
        yield db
    finally:
        await db.close()


async def _run(settings: Settings, url: str, args: argparse.Namespace) -> int:
    from ticketiq.leader.retention import RetentionPass, exporter_for
    from ticketiq.values.retention import Policy

    async with _opened(settings, url) as db:
        process = f"cli:{socket.gethostname()}:{os.getpid()}"
        exporter = None if args.dry_run else exporter_for(db, settings)
        report = await RetentionPass(db, Policy.of(settings), process, exporter=exporter).run(dry_run=args.dry_run)
    for line in report.lines():
        print(line)
    print(f"in {report.seconds:.2f} s")
    return 0


async def _status(settings: Settings, url: str, args: argparse.Namespace) -> int:
    async with _opened(settings, url) as db:
        found = await status(db, settings)
    if args.json:
        print(json.dumps(found, indent=2))
    else:
        for line in render(found):
            print(line)
    return 0


async def status(db: Any, settings: Settings) -> dict[str, Any]:
    """What `retention status --json` prints (and the console shows of the last pass)."""
    from ticketiq.storage.retention_store import RetentionStore
    from ticketiq.values import retention
    from ticketiq.values.retention import Policy

    store = RetentionStore(db, None)
    rows, oldest, due = await store.rows(), await store.oldest(), await store.due(Policy.of(settings))
    last = retention.last_pass_view(await store.last_pass())
    tables = {
        table: {"rows": count, "oldest_s": _rounded(oldest.get(table)), "due": due.get(table)}
        for table, count in rows.items()
    }
    policies = {name: _policy(getattr(settings, f"retention_{name}")) for name in ("runs", "audit", "jobs")}
    folder = settings.retention_export_dir
    return {
        "policies": {**policies, "every": str(settings.retention_every), "batch": settings.retention_batch,
                     "export_dir": None if folder is None else str(folder)},
        "held_runs": due.get("held_runs", 0),
        "tables": tables,
        "last_pass": last,
    }  # fmt: skip


def render(found: dict[str, Any]) -> list[str]:
    """`retention status` for a person: the policies, a table per table, the last pass."""
    p = found["policies"]
    lines = [f"policies: runs {p['runs']}, audit {p['audit']}, jobs {p['jobs']}; a pass every {p['every']}, "
             f"{p['batch']:,} rows a statement" + (f"; export to {p['export_dir']}" if p["export_dir"] else ""),
             f"held runs: {found['held_runs']:,}", "",
             f"{'table':<20} {'rows':>12} {'oldest':>10} {'due now':>10}"]  # fmt: skip
    for table, t in found["tables"].items():
        oldest = "-" if t["oldest_s"] is None else str(Duration(round(t["oldest_s"])))
        due = "-" if t["due"] is None else f"{t['due']:,}"
        lines.append(f"{table:<20} {t['rows']:>12,} {oldest:>10} {due:>10}")
    last = found["last_pass"]
    lines.append("")
    if last is None:
        lines.append("last pass: none yet")
    else:
        deleted = ", ".join(f"{k} {v:,}" for k, v in last["deleted"].items()) or "nothing"
        state = f"stopped: {last['error']}" if last["error"] else last["state"]
        lines.append(f"last pass: {last['started_at']} by {last['process']} ({state}); deleted {deleted}")
    return lines


def _policy(value: Duration) -> str:
    return "forever" if value.forever else str(value)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
