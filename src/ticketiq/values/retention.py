"""What the retention pass keeps and for how long (issue 34), and how it tallies what it deleted: pure.

The policies are settings (TICKETIQ_RETENTION_RUNS, _AUDIT, _JOBS; 0 keeps for ever); the short-lived rows
each follow a fixed rule, named here once:

- an Idempotency-Key: TICKETIQ_IDEMPOTENCY_TTL_S after its answer (at least a day), or with the run it
  points at;
- a console session: once it expired (an expired session is refused anyway);
- a process's row: a day after the process ended, once it holds no lease;
- a webhook's signed claim: once its signature's window (and a margin) passed, when a copy is refused as
  stale anyway. A Jira claim is kept: Jira signs no time, so its signature never stops being valid;
- a schedule fire or a Teams inbox row that made no run (skipped or failed, with a reason): a week after
  it was received. One with a run goes with its run; one still to be made is never touched.
- a kept answer: TICKETIQ_ANSWER_TTL_S (I12), never while it is still to be handed on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ticketiq.settings import Settings

PROCESS_ROWS_KEPT_S = 24 * 3600.0
RUNLESS_ROWS_KEPT_S = 7 * 24 * 3600.0

# The tables a run's purge reports, in the order `retention run` prints them.
RUN_TABLES = (
    "runs", "checkpoints", "calls", "transcripts", "run_attempts", "answers", "approvals", "inputs", "a2a_tasks",
    "ticket_events", "trigger_deliveries", "schedule_fires", "teams_inbox", "idempotency_keys",
    "workflow_steps_unlinked", "audit_log_unlinked", "signed_requests_marked",
)  # fmt: skip
SHORT_LIVED_TABLES = (
    "idempotency_keys", "console_sessions", "processes", "signed_requests", "schedule_fires", "teams_inbox",
    "answers",
)  # fmt: skip
JOB_TABLES = ("jobs", "workflow_steps", "red_team_answers")
AUDIT_TABLES = ("audit_log",)


@dataclass(frozen=True)
class Policy:
    """How long each kind of row is kept, in seconds; 0 keeps for ever."""

    runs_s: float
    audit_s: float
    jobs_s: float
    keys_s: float
    batch: int
    processes_s: float = PROCESS_ROWS_KEPT_S
    runless_s: float = RUNLESS_ROWS_KEPT_S

    @classmethod
    def of(cls, settings: Settings) -> Policy:
        return cls(
            runs_s=float(settings.retention_runs), audit_s=float(settings.retention_audit),
            jobs_s=float(settings.retention_jobs), keys_s=settings.idempotency_ttl_s, batch=settings.retention_batch,
        )  # fmt: skip

    def keeps_forever(self, kind: str) -> bool:
        return {"runs": self.runs_s, "audit": self.audit_s, "jobs": self.jobs_s}[kind] == 0


def tally(total: Mapping[str, int], batch: Mapping[str, int]) -> dict[str, int]:
    """`total` with a batch's counts added, table by table."""
    out = dict(total)
    for table, count in batch.items():
        out[table] = out.get(table, 0) + int(count)
    return out


def full(counts: Mapping[str, int], tables: Iterable[str], limit: int) -> bool:
    """Whether a batch filled its limit in any of `tables`: there may be more, so the pass goes on."""
    return any(counts.get(table, 0) >= limit for table in tables)


# What a run's purge counts but keeps: audit rows unlinked from it, signed claims marked.
KEPT_SUFFIXES = ("_unlinked", "_marked")


def rows_deleted(deleted: Mapping[str, int]) -> int:
    """The rows a pass deleted: not those it only unlinked from a purged run or marked."""
    return sum(int(n) for table, n in deleted.items() if not table.endswith(KEPT_SUFFIXES))


def report(deleted: Mapping[str, int], dry_run: bool) -> list[str]:
    """The lines `ticketiq retention run` prints: each table and its rows, widest name first aligned."""
    verb = "would delete" if dry_run else "deleted"
    shown = {table: count for table, count in sorted(deleted.items()) if count}
    if not shown:
        return [f"{verb} nothing: no row is past its policy"]
    width = max(len(table) for table in shown)
    lines = [f"{verb}:"]
    for table, count in shown.items():
        lines.append(f"  {table:<{width}}  {count:>10,}")
    return lines


def last_pass_view(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The last pass as `retention status --json`, `GET /v1/processes` and the console show it: when, by
    whom, its state, what it deleted (the tables it deleted from), its total, the files it exported."""
    if row is None:
        return None
    deleted = {table: int(n) for table, n in sorted(dict(row["deleted"]).items()) if n}
    state = "stopped" if row["error"] else ("running" if row["ended_at"] is None else "done")
    return {"started_at": _iso(row["started_at"]), "ended_at": _iso(row["ended_at"]), "process": row["process"],
            "state": state, "deleted": deleted, "total": rows_deleted(deleted), "exported": list(row["exported"]),
            "error": row["error"]}  # fmt: skip


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()
