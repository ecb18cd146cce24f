"""Each app process's job worker (issue 10; I13).

It claims queued jobs up to `TICKETIQ_JOB_CONCURRENCY` at a time (one statement takes the job, raises
its attempt and inserts its lease `job:<id>`), looks every `TICKETIQ_JOB_POLL_S` and at once when this
process made a job. A claimed job's lease is held by the process's `LeaseKeeper`, renewed with its other
leases in one statement; the moment the keeper reports it lost (taken over, or the process's liveness
mark lost), the job's work is cancelled and it writes nothing more (I3). The kind's `run` decides how
it ends (`endings.py`); the ending is one fenced statement that also deletes the lease.

A clean stop hands the jobs back: resumable ones at once (queued again, nothing lost: they go on from
their last save), the others after the shutdown grace (interrupted, with the reason). A process that
dies hands nothing back: the leader's sweep finds its jobs (`leader/sweep.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.errors import JobLost, StorageError
from ticketiq.jobs import kinds
from ticketiq.jobs.endings import Ending, ending_of, free_slots
from ticketiq.jobs.queue import JobQueue
from ticketiq.jobs.running import RunningJob
from ticketiq.runtime.background import Background
from ticketiq.storage.job_store import JobRow, JobStore, job_lease
from ticketiq.storage.knowledge_store import KnowledgeStore
from ticketiq.storage.workflow_store import WorkflowStore

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine

log = logging.getLogger(__name__)

# A finish that failed on a retryable database error is tried again this often while the lease holds.
FINISH_RETRY_S = 0.5
# How long a clean stop lets a claim already sent come back (its jobs then go back unstarted) before it
# cancels it (a claim cut off mid-way may have taken jobs: the sweep takes them back).
CLAIM_WAIT_S = 5.0


@dataclass(eq=False)
class Slot:
    job: RunningJob
    resumable: bool
    task: asyncio.Task[None]


class JobWorker:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.settings = engine.deps.settings
        self.store = JobStore(engine.deps.db)
        self.queue = JobQueue(engine, self.wake)
        self.slots: dict[str, Slot] = {}  # by job id
        self.stopping = False
        self._wake = asyncio.Event()
        self._background = Background("job-worker", self.run)

    def wake(self) -> None:
        """Look for queued jobs now (a job was made here, or a slot came free)."""
        self._wake.set()

    def start(self) -> None:
        if self.settings.job_concurrency > 0:
            self._background.start()

    async def run(self) -> None:
        while not self.stopping:
            self._wake.clear()
            try:
                await self.claim_once()
            except StorageError as exc:
                log.error("job claim failed (%s); looking again in %g s", exc, self.settings.job_poll_s)
            except Exception:
                log.exception("job claim failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.job_poll_s)

    async def claim_once(self) -> int:
        """Claim queued jobs for the free slots and start them; return how many."""
        deps = self.engine.deps
        free = free_slots(self.settings.job_concurrency, len(self.slots), self.engine.admitted.is_set(), self.stopping)
        if free == 0:
            return 0
        holder, marks = deps.holder, self.engine.marks_lost
        sent_at = time.monotonic()
        claimed = await self.store.claim(holder, self.settings.lease_ttl_s, free)
        lost_meanwhile = deps.holder != holder or self.engine.marks_lost != marks
        if claimed and (lost_meanwhile or not self.engine.admitted.is_set() or self.stopping):
            # Our liveness mark was lost (even if since taken again under the same identity: the claim's
            # lease deadline runs from before the loss) or we began to stop while the claim was out: they
            # go back unstarted (fenced by the claim's attempt), or, should that fail, the sweep takes them.
            back = await self.store.unclaim([(row.id, row.attempt) for row in claimed])
            log.warning("claimed %d jobs as %s while it stopped or lost its mark; %d queued again", len(claimed),
                        holder, back)  # fmt: skip
            if lost_meanwhile and not self.stopping:
                self.wake()  # claimed again at once, under a deadline that runs from now
            return 0
        for row in claimed:
            self._launch(row, holder, sent_at)
        return len(claimed)

    def _launch(self, row: JobRow, holder: str, sent_at: float) -> None:
        deps = self.engine.deps
        lease = deps.keeper.hold_lease(job_lease(row.id), sent_at, row.id, row.attempt)
        job = RunningJob(
            id=row.id, kind=row.kind, params=row.params, attempt=row.attempt, losses=row.losses, state=row.state,
            created_by=row.created_by, engine=self.engine, settings=self.settings, http=deps.http,
            knowledge=KnowledgeStore(deps.db), workflows=WorkflowStore(deps.db), lease=lease,
            handle=self.store.handle(row.id, row.attempt, holder),
        )  # fmt: skip
        log.info("job %s (%s) claimed by %s, attempt %d, losses %d", row.id, row.kind, holder, row.attempt, row.losses)
        task = asyncio.create_task(self._drive(job), name=f"job-{row.id}")
        self.slots[row.id] = Slot(job, row.resumable, task)

    async def _drive(self, job: RunningJob) -> None:
        handed_back = False
        try:
            work = asyncio.create_task(self._work(job), name=f"job-{job.id}-work")
            lost = asyncio.create_task(job.lease.lost.wait(), name=f"job-{job.id}-lease")
            try:
                await asyncio.wait({work, lost}, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                handed_back = self.stopping  # a clean stop: `stop` hands it back
                raise
            finally:
                lost.cancel()
                if not work.done():
                    work.cancel()
                with contextlib.suppress(BaseException):
                    await work
            if job.lease.lost.is_set() or work.cancelled():
                log.warning("job %s attempt %d stopped: its lease was lost (%s); nothing more is written",
                            job.id, job.attempt, job.lease.why)  # fmt: skip
                return
            error = work.exception()
            end = ending_of(None if error else work.result(), error, self._resumable(job.id))
            if end is None:
                log.warning("job %s attempt %d stopped and writes nothing more: %s", job.id, job.attempt, error)
                return
            try:
                await self._finish(job, end, error)
            except StorageError as exc:
                log.error("job %s: its end (%s) was refused (%s); its lease lapses and the sweep takes it back",
                          job.id, end.status, exc)  # fmt: skip
        finally:
            self.slots.pop(job.id, None)
            if not handed_back:
                self.engine.deps.keeper.drop_lease(job_lease(job.id))
            self.wake()  # a slot came free

    async def _work(self, job: RunningJob) -> dict[str, Any]:
        kind = kinds.kind(job.kind)
        result: dict[str, Any] = await kind.run(job)
        return result

    async def _finish(self, job: RunningJob, end: Ending, error: BaseException | None) -> None:
        if end.unexpected:
            log.error("job %s (%s) attempt %d failed: %s", job.id, job.kind, job.attempt, end.error, exc_info=error)
        while True:
            try:
                job.check()  # I3: nothing is written once the lease deadline passed
                job.lease.releasing = True  # the finish deletes the lease: a renewal crossing it loses nothing
                await job.handle.finish(end.status, end.result, end.error)
            except StorageError as exc:
                job.lease.releasing = False
                if not exc.retryable:
                    raise
                log.error("job %s: its end (%s) was not written (%s); trying again", job.id, end.status, exc)
                await asyncio.sleep(FINISH_RETRY_S)
                continue
            except JobLost as exc:
                log.warning("%s", exc)
                return
            log.info("job %s (%s) %s", job.id, job.kind, end.status)
            return

    def _resumable(self, job_id: str) -> bool:
        slot = self.slots.get(job_id)
        return slot is not None and slot.resumable

    async def stop(self, grace_s: float) -> None:
        """A clean stop: claim no more; resumable jobs are handed back at once (they go on from their
        last save elsewhere), the others may finish for `grace_s`, then are handed back interrupted."""
        self.stopping = True
        self.wake()
        if self._background.task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._background.task), CLAIM_WAIT_S)
        await self._background.stop()
        # Those that end by themselves meanwhile end as usual; the hand-back, fenced by the attempt
        # and status, passes them by.
        held = list(self.slots.values())
        others = [slot.task for slot in held if not slot.resumable]
        for slot in held:
            if slot.resumable:
                slot.task.cancel()
        if others:
            await asyncio.wait(others, timeout=grace_s)
        for slot in held:
            slot.task.cancel()
        for slot in held:
            with contextlib.suppress(BaseException):
                await slot.task
        if not held:
            return
        keeper = self.engine.deps.keeper
        for slot in held:
            lease = keeper.held.get(job_lease(slot.job.id))
            if lease is not None:
                lease.releasing = True
        try:
            back = await self.store.hand_back(self.engine.deps.holder, [(s.job.id, s.job.attempt) for s in held])
            for job in back:
                log.info("job %s (%s) handed back: %s", job.id, job.kind, job.status)
        except StorageError as exc:
            log.error("could not hand %d jobs back (%s); their leases will lapse and the sweep takes them",
                      len(held), exc)  # fmt: skip
        for slot in held:
            keeper.drop_lease(job_lease(slot.job.id))
