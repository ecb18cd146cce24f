"""The retention pass (issue 34): ended runs with every row that names them, audit rows, ended jobs and the
short-lived rows, each past its policy (values/retention.py), deleted in bounded batches.

- Each batch is one statement and its own short transaction (`queries/retention.sql`), reading an index; it
  takes rows FOR UPDATE SKIP LOCKED, so two passes at once never wait on each other or delete a row twice,
  and it never locks a run that has not ended (a running step waits on nothing of it).
- The leader runs it every TICKETIQ_RETENTION_EVERY (`Keeper`, started by the election beside the sweeps
  and cancelled with them); each of its statements is fenced by the leader lease, and a batch that finds
  the lease gone stops the pass (`LeadershipLost`). `ticketiq retention run` runs one pass unfenced.
- With an exporter (TICKETIQ_RETENTION_EXPORT_DIR) each batch of runs is written, fsynced, and only then
  deleted, by id: a crash between the two leaves the rows, never a hole.
- A dry run makes the same statements inside one transaction and rolls it back: it reports exactly what a
  pass would delete now, and deletes nothing.
- Each pass is recorded (`retention_passes`): `retention status` and the console show the last one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ticketiq.errors import TicketIQError
from ticketiq.metrics import Metrics
from ticketiq.storage.database import Database
from ticketiq.storage.retention_store import RetentionStore
from ticketiq.values import retention
from ticketiq.values.retention import Policy

if TYPE_CHECKING:
    from ticketiq.settings import Settings

log = logging.getLogger(__name__)

# How long a pass stopped by a cancellation may take to record so, at most.
END_RECORD_S = 2.0
# After each batch the pass rests this share of the time the batch took, so that the runs in flight keep
# most of a busy machine: with 32 runs in flight on 2 cores, flat out the pass moved a step statement's p99
# 1.57x (bench/retention.py); at 1.0 it works half the time, still well above 10,000 rows a second.
REST_SHARE = 1.0

# Writes the given ended runs to a file, fsynced, and returns its path (None: none was written) and the runs
# it wrote, which are the ones then deleted (views/run_export.py).
Exporter = Callable[[list[str]], Awaitable[tuple[str | None, list[str]]]]


class LeadershipLost(TicketIQError):
    """The leader lease is no longer this process's: its pass stops where it is."""


class _DryRun(Exception):
    """Raised to roll a dry run's transaction back."""


@dataclass
class PassReport:
    dry_run: bool
    deleted: dict[str, int] = field(default_factory=dict)
    exported: list[str] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    def lines(self) -> list[str]:
        out = retention.report(self.deleted, self.dry_run)
        out += [f"exported to {path}" for path in self.exported]
        return out


class RetentionPass:
    def __init__(
        self,
        db: Database,
        policy: Policy,
        process: str,
        *,
        leader: str | None = None,
        exporter: Exporter | None = None,
        metrics: Metrics | None = None,
        rest_share: float = REST_SHARE,
    ) -> None:
        self.db = db
        self.rest_share = rest_share
        self._in_dry_run = False
        self.policy = policy
        self.process = process
        self.leader = leader
        self.exporter = exporter
        self.metrics = metrics

    async def run(self, dry_run: bool = False) -> PassReport:
        """One pass; recorded (a dry run too), its error with it. LeadershipLost is raised after the record."""
        started = time.monotonic()
        record = RetentionStore(self.db, self.leader)
        pass_id, _ = await record.begin_pass(self.process, dry_run)
        report = PassReport(dry_run)
        try:
            if dry_run:
                self._in_dry_run = True
                try:
                    async with self.db.transaction() as tx:
                        await self._purge(RetentionStore(tx, self.leader), report, export=False)
                        raise _DryRun
                except _DryRun:
                    pass
            else:
                await self._purge(record, report, export=self.exporter is not None)
        except asyncio.CancelledError:
            # The leader stepped down or the process stops: the record says so, within a moment, and the
            # cancellation goes on (never left running detached while the pool closes under it).
            report.error = "stopped: the process no longer leads, or it stops"
            report.seconds = time.monotonic() - started
            with contextlib.suppress(Exception):
                async with asyncio.timeout(END_RECORD_S):
                    await record.end_pass(pass_id, report.deleted, report.exported, report.error)
            raise
        except Exception as exc:
            report.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            report.seconds = time.monotonic() - started
            await record.end_pass(pass_id, report.deleted, report.exported, report.error)
            raise
        report.seconds = time.monotonic() - started
        if self.metrics is not None and not dry_run:  # before the record: whoever reads it finds them counted
            self.metrics.retention_pass(report.seconds, report.deleted, await record.oldest())
        await record.end_pass(pass_id, report.deleted, report.exported, report.error)
        return report

    async def _purge(self, store: RetentionStore, report: PassReport, export: bool) -> None:
        policy = self.policy
        if not policy.keeps_forever("runs"):
            await (self._runs_exported(store, report) if export else self._batches(store.purge_runs, report, ("runs",)))
        if not policy.keeps_forever("audit"):
            await self._batches(store.purge_audit, report, retention.AUDIT_TABLES)
        if not policy.keeps_forever("jobs"):
            await self._batches(store.purge_jobs, report, ("jobs",))
        await self._batches(store.purge_short_lived, report, retention.SHORT_LIVED_TABLES)

    async def _batches(
        self, purge: Callable[[Policy], Awaitable[tuple[bool, dict[str, int]]]], report: PassReport,
        tables: tuple[str, ...],
    ) -> None:  # fmt: skip
        """Batches of one statement until one does not fill its limit."""
        while True:
            began = time.monotonic()
            fenced, counts = await purge(self.policy)
            self._tally(fenced, counts, report)
            if not retention.full(counts, tables, self.policy.batch):
                return
            await self._rest(began)

    async def _runs_exported(self, store: RetentionStore, report: PassReport) -> None:
        """Each batch of runs written out and fsynced, then those runs (still due) deleted by id."""
        assert self.exporter is not None
        while True:
            began = time.monotonic()
            ids = await store.purgeable_runs(self.policy)
            if not ids:
                return
            path, written = await self.exporter(ids)
            if path is not None:
                report.exported.append(path)
            fenced, counts = await store.purge_runs(self.policy, written) if written else (True, {})
            self._tally(fenced, counts, report)
            # A batch none of whose runs could go (each held or locked meanwhile) would come back the same.
            if len(ids) < self.policy.batch or not counts.get("runs"):
                return
            await self._rest(began)

    async def _rest(self, began: float) -> None:
        """Between two batches: a rest as long as `rest_share` of the batch (none in a dry run's transaction)."""
        if self.rest_share > 0 and not self._in_dry_run:
            await asyncio.sleep((time.monotonic() - began) * self.rest_share)

    def _tally(self, fenced: bool, counts: dict[str, int], report: PassReport) -> None:
        if not fenced:
            raise LeadershipLost(f"process {self.process} no longer leads: its retention pass stops")
        report.deleted = retention.tally(report.deleted, counts)


class Keeper:
    """The leader's retention: a pass every TICKETIQ_RETENTION_EVERY while it leads (cancelled with the
    lead); a pass that fails is logged and tried again at the next turn."""

    def __init__(self, make: Callable[[], RetentionPass], every_s: float) -> None:
        self.make = make
        self.every_s = every_s
        self.last: PassReport | None = None

    async def run(self) -> None:
        while True:
            # The interval first: a process that just became leader (a restart, a failover) does not add a
            # pass to its start; a pass that finds much due catches up in batches all the same.
            await asyncio.sleep(self.every_s)
            try:
                self.last = await self.make().run()
                if any(self.last.deleted.values()):
                    log.info("retention pass: %s", "; ".join(line.strip() for line in self.last.lines()))
            except LeadershipLost as exc:
                log.warning("%s", exc)
                return
            except Exception:
                log.exception("retention pass failed; trying again in %.0f s", self.every_s)


def exporter_for(db: Database, settings: Settings) -> Exporter | None:
    """The pass's export of each batch into TICKETIQ_RETENTION_EXPORT_DIR; None when it is unset."""
    folder = settings.retention_export_dir
    if folder is None:
        return None
    from ticketiq.views import run_export

    async def export(ids: list[str]) -> tuple[str | None, list[str]]:
        done = await run_export.export_runs_for(db, ids, Path(folder))
        return (None if done.path is None else str(done.path)), list(done.run_ids)

    return export
