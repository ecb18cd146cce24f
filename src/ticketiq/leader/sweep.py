"""The leader's sweeps: claim lapsed checkpoint leases (I5) and the leases of dead processes, and take
queued runs no one started. Each claim gives the run, under its new attempt, to the least loaded live
process (migration 012's `run_targets`, in the claim's one statement): the leader drives what lands on
itself, another process takes its runs up (`handoffs.py`). The leader also fires due cron schedules
(`intake/scheduler.py`), whose runs are spread the same way, and takes back the background jobs of
processes that died (`sweep_jobs`: queued again, or failed `interrupted`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

from ticketiq.engine import resume
from ticketiq.intake import teams_turns
from ticketiq.intake.scheduler import Scheduler
from ticketiq.leader.retention import PassReport, RetentionPass, exporter_for
from ticketiq.storage import database
from ticketiq.storage.job_store import JobStore
from ticketiq.storage.outage import server_gone
from ticketiq.values.retention import Policy

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)

CLAIM_BATCH = 100
LAPSE_MARGIN_S = 0.05


def sweep_due(now: float, interval_s: float, next_lapse_s: float | None) -> float:
    """When to sweep for lapsed leases next: after the interval, or as soon as the first lease still
    held would lapse if that comes sooner (a stalled process's runs are then claimed at its TTL, not
    up to an interval later). The margin lets the database clock pass the expiry for sure."""
    if next_lapse_s is None:
        return now + interval_s
    return now + min(interval_s, max(0.0, next_lapse_s) + LAPSE_MARGIN_S)


class Sweeper:
    def __init__(self, engine: Engine, url: str) -> None:
        self.engine = engine
        self.url = url
        self.scheduler = Scheduler(engine)
        self.cron_due_at = 0.0
        self.left_logged: set[str] = set()  # runs left for a newer release, each logged once (note_left)

    @property
    def settings(self) -> Any:
        return self.engine.deps.settings

    async def claim(self, why: str) -> int:
        """Claim what is dead (`dead`) or lapsed (`lapsed`), each run given to the least loaded live
        process (driven here when that is this one); return how many runs. Runs this process still
        drives are never claimed back (one driver per run per process)."""
        deps = self.engine.deps
        ttl = self.settings.lease_ttl_s
        sent_at = time.monotonic()
        if why == "dead":
            taken = await deps.store.claim_dead(deps.holder, ttl, self.engine.driving())
        else:
            taken = await deps.store.claim_lapsed(deps.holder, ttl, CLAIM_BATCH, self.engine.driving())
        for given in taken:
            deps.metrics.claimed(given.why)
            log.warning("claimed run %s (%s), attempt %s, losses %s, for %s", given.run_id, given.why,
                        given.attempt, given.losses, given.holder)  # fmt: skip
            self.engine.give(given, sent_at)
        return len(taken)

    def settling(self) -> bool:
        """The database came back moments ago (a failover, a restart): every process is re-taking its
        liveness mark, so a free mark says nothing yet (`storage/outage.py`). No process is judged dead
        until TICKETIQ_DB_BACK_GRACE_S passed; lapsed leases and lost jobs are claimed meanwhile (their
        holders gave them up when their marks went, or let them lapse)."""
        return self.engine.deps.db.outage.settling(self.settings.db_back_grace_s)

    async def sweep_once(self, lapsed: bool) -> float | None:
        """Claim what is dead (and, when `lapsed`, what lapsed); return the seconds until the next
        checkpoint lease would lapse, when that was looked up."""
        store, deps_holder = self.engine.deps.store, self.engine.deps.holder
        if not self.settling():
            await self.claim("dead")
        # Lapsed leases and lost jobs are claimed meanwhile: their holders gave them up (the retake),
        # or let them lapse, whatever became of the holders.
        if await self.sweep_jobs():
            self.engine.wake_jobs()  # queued again: this process's worker looks at once
        await self.fire_schedules()
        if not lapsed:
            return None
        while await self.claim("lapsed") == CLAIM_BATCH:
            pass
        # Each to the least loaded live process, which a start before it was given to already counts.
        for run_id in await store.orphaned_queued(deps_holder, self.settings.queued_grace_s, CLAIM_BATCH):
            await self.engine.hand(run_id)
        # I15: a run left waiting with every request decided (its wake-up was lost) goes on.
        for run_id in await store.waiting_decided(deps_holder, CLAIM_BATCH):
            await self.engine.hand(run_id)
        await teams_turns.adopt_unstarted(self.engine)  # inbox rows whose process died before their run
        await self.note_left()
        return await store.next_lapse_s(deps_holder)

    async def note_left(self) -> None:
        """Log once each run left for a process that knows its checkpoint's format (no live one does:
        a newer release wrote it and none of its processes lives). Nothing is done to the run."""
        known = (resume.THIS_RELEASE.state_format, resume.THIS_RELEASE.seal_format)
        left = await self.engine.deps.store.left_for_release(known, CLAIM_BATCH)
        for run in left:
            if run.run_id not in self.left_logged:
                log.warning("run %s is left for a newer release: %s; no live process knows it, so it waits for %s",
                            run.run_id, resume.format_unknown(run.state_format, run.seal_format),
                            resume.waits_for_release(run.state_format, run.seal_format))  # fmt: skip
        self.left_logged = {run.run_id for run in left}  # a run taken up since, and back later, is told again

    async def sweep_jobs(self) -> int:
        """I13: jobs whose process died or stopped renewing their lease, each taken back once: resumable
        ones queued again for any process's worker (one loss counted), the others failed `interrupted`
        with the reason. One statement per batch; it reads only running jobs."""
        deps = self.engine.deps
        swept = 0
        while True:
            taken = await JobStore(deps.db).sweep(deps.holder, self.settings.job_max_losses, CLAIM_BATCH)
            for job in taken:
                log.warning("job %s (%s) lost: %s; now %s, losses %d", job.id, job.kind, job.why, job.status,
                            job.losses)  # fmt: skip
            swept += len(taken)
            if len(taken) < CLAIM_BATCH:
                return swept

    async def fire_schedules(self) -> None:
        """The cron scheduler's step, every TICKETIQ_CRON_CHECK_S: one query for due schedules, each due
        fire made once."""
        if time.monotonic() < self.cron_due_at:
            return
        self.cron_due_at = time.monotonic() + self.settings.cron_check_s
        await self.scheduler.fire_due()

    def retention_pass(self, fenced: bool = True) -> RetentionPass:
        """The leader's retention pass (leader/retention.py): every policy, each statement fenced by the
        leader lease (unless not `fenced`: one pass now, as `ticketiq retention run` makes)."""
        deps = self.engine.deps
        return RetentionPass(deps.db, Policy.of(self.settings), deps.holder, leader=deps.holder if fenced else None,
                             exporter=exporter_for(deps.db, self.settings), metrics=deps.metrics)  # fmt: skip

    async def prune(self) -> PassReport:
        """One retention pass now, unfenced (what the leader runs every TICKETIQ_RETENTION_EVERY)."""
        return await self.retention_pass(fenced=False).run()

    async def run(self) -> None:
        """Dead processes every liveness poll (or at once when a process announces itself), lapsed
        leases every sweep interval or the moment the first held lease lapses, if sooner."""
        listener: database.Connection | None = None
        next_sweep = 0.0
        try:
            while True:
                # While processes are coming back (after a failover) each one's retake gives its leases
                # up: they are looked for at every turn, not only at the sweep interval.
                lapsed = time.monotonic() >= next_sweep or self.settling()
                try:
                    next_lapse = await self.sweep_once(lapsed=lapsed)
                    if lapsed:
                        next_sweep = sweep_due(time.monotonic(), self.settings.sweep_interval_s, next_lapse)
                    if listener is None or listener.closed:
                        limits = self.engine.deps.db.limits  # the pool's: within the connect timeout
                        listener = await database.connect(self.url, limits)
                        await database.listen(listener, "ticketiq_processes", within_s=limits.answer_within_s)
                except Exception as exc:
                    if server_gone(exc):
                        log.error("sweep failed, the database is gone (%s); trying again", exc)
                    else:
                        log.exception("sweep failed; trying again")
                    if listener is not None:
                        with contextlib.suppress(Exception):
                            await listener.close()
                    listener = None
                await self._wait(listener, min(self.settings.liveness_poll_s, next_sweep - time.monotonic()))
        finally:
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.close()

    async def _wait(self, listener: database.Connection | None, seconds: float) -> None:
        timeout = max(0.0, seconds)
        if listener is None:
            await asyncio.sleep(timeout)
            return
        # Until the first announcement or the timeout (run to its end, so psycopg lets go of the
        # connection); a lost listener is opened again after the next sweep.
        with contextlib.suppress(Exception):
            async for _ in listener.notifies(timeout=timeout, stop_after=1):
                pass
