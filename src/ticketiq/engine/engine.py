"""A process's engine: what the entry points ask of it (submit, read, stop, decide), and the drivers.

A run is taken (acquire: its lease and a new attempt) and driven in a task of its own. One process
drives a run at most once at a time: a launch while a driver of the run still drives here is refused,
a driver's end drops only its own lease, and the sweeps never claim runs this process still drives.
While the process comes back under a new identity (its liveness mark was lost) it admits no run.

What the leader takes (claims, and the starts it makes) is spread over the live processes: each take
gives the run's lease to the least loaded one (`hand`, `Sweeper.claim`), which drives it here when that
is this process; another takes it up (`take_up`, told by NOTIFY and looking every renewal interval).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from ticketiq.agents.catalog import Agent
from ticketiq.auth import tokens
from ticketiq.engine import resume, run_keys, seal
from ticketiq.engine.approvals import undecided
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.driver import HANDED_OVER, RunDriver
from ticketiq.engine.questions import Answer, Answered, Verdict, judge
from ticketiq.engine.run_keys import Expected
from ticketiq.engine.state import RunState
from ticketiq.errors import Conflict, NotFound, RequestError, TicketIQError
from ticketiq.runtime import logs, tracing
from ticketiq.storage.rows import (
    Approval,
    AskedApproval,
    Checkpoint,
    Created,
    RunRecord,
    RunStatus,
    Waiting,
)
from ticketiq.storage.run_store import Given

log = logging.getLogger(__name__)


def _nothing() -> None:
    return None


TERMINAL = frozenset({"succeeded", "failed", "interrupted", "stopped"})
# Takes that took a run from a process that lost it (I5): its driver resumes it as a takeover.
CLAIMED = frozenset({"dead", "lapsed"})
# How long a run started during a reincarnation waits to be admitted before it is left queued (the
# sweep takes queued runs no process started).
ADMISSION_WAIT_S = 5.0


class Engine:
    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps
        self.store = deps.store
        self.gates = deps.gates
        self.tasks: dict[str, asyncio.Task[str]] = {}
        self.drivers: dict[str, RunDriver] = {}
        # (run, attempt) of the runs whose drivers stopped at a step boundary to be handed over (shutdown).
        self.handed_over: list[tuple[str, int]] = []
        # Set while the process holds a liveness mark under its current identity.
        self.admitted = asyncio.Event()
        self.admitted.set()
        self.marks_lost = 0  # how often this process's liveness mark went (each loss loses every lease)
        # Told when the leader's sweep queued jobs again: the process's job worker looks at once.
        self.wake_jobs: Callable[[], None] = _nothing

    # ----- what entry points ask ------------------------------------------------------------------

    async def submit(
        self,
        agent_name: str,
        text: str,
        *,
        may_wait: bool | None = None,
        channel: str = "api",
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        actor: str = "api",
        start: bool = True,
        traceparent: str | None = None,
    ) -> Created:
        """Create a run and start it here, started by `actor` (the API token's name: the run's
        `created_by`); with `start` false the caller starts it, once it recorded what it must first.
        `idempotency_key` is made by `run_keys` in the maker's namespace (a token's keys are its own). A
        repeated key returns the first request's run (422 when the body differs, or when the run under
        the key is not one this maker made: a key is no way to reach someone else's run, I19)."""
        agent = self.deps.catalog.get(agent_name)
        if agent is None:
            known = ", ".join(sorted(self.deps.catalog.agents))
            raise NotFound("body.agent", f"no agent named {agent_name!r}; the agents: {known}")
        if may_wait and not agent.may_wait:
            raise RequestError("body.may_wait", f"agent {agent_name} may not wait: its agents file entry says so")
        # Born taken by this process (one statement, the run's status known from it), unless the process
        # is not admitting runs: then it is made queued, for the sweep.
        created = await self.create_run(
            agent, text, may_wait=may_wait, channel=channel, idempotency_key=idempotency_key,
            request_hash=request_hash, actor=actor, created_by=actor, take=start and await self._admission(),
            traceparent=traceparent,
        )  # fmt: skip
        if not created.created and (foreign := run_keys.foreign(created, Expected(channel, created_by=actor))):
            # Unreachable through the API (each token's keys are its own namespace): a row put in the
            # database by other means. Refused, and never handed out.
            log.error("run key of %s on %s: %s", actor, channel, foreign)
            raise RequestError("header.Idempotency-Key", "the run under this key is not this token's; use a fresh key")
        if not created.created and created.request_hash != request_hash:
            raise RequestError("header.Idempotency-Key", "this Idempotency-Key was used with a different request body")
        return created

    async def get_run(self, run_id: str, created_by: str | None = None) -> RunRecord | None:
        """The run; with `created_by`, only a run that token started (else None, as if there were none:
        a caller is not told that another's run exists)."""
        run = await self.store.get(run_id)
        if run is None or not tokens.may_read(run.created_by, created_by):
            return None
        return run

    async def request_stop(self, run_id: str, by: str) -> RunStatus:
        """A waiting or queued run ends at once; a running one at its next gate check."""
        stopped = await self.store.request_stop(run_id, by)
        if stopped is None:
            raise NotFound("path.run_id", f"no run {run_id}")
        status = await self.store.status(run_id)
        assert status is not None
        if stopped.ended_now:  # no driver ended it, so no driver counts it
            self.deps.metrics.run_ended(stopped.agent, stopped.channel, status.status)
        return status

    async def hold(self, run_id: str, by: str, reason: str | None) -> dict[str, Any]:
        """Keep the run whatever the retention policy says, until the hold is released (issue 34)."""
        held = await self.store.hold(run_id, by, reason)
        if held is None:
            raise NotFound("path.run_id", f"no run {run_id}")
        return {"id": run_id, "held": True, "held_at": held["held_at"], "held_by": held["held_by"],
                "hold_reason": held["hold_reason"]}  # fmt: skip

    async def release(self, run_id: str, by: str, reason: str | None) -> dict[str, Any]:
        was_held = await self.store.release(run_id, by, reason)
        if was_held is None:
            raise NotFound("path.run_id", f"no run {run_id}")
        return {"id": run_id, "held": False, "was_held": was_held}

    async def approvals(self, status: str | None, limit: int) -> list[Approval]:
        return await self.store.approvals(status, limit)

    async def asked_approvals(self, status: str | None, limit: int) -> list[AskedApproval]:
        """As `approvals`, each with its run's agent and the token that started the run, in one read."""
        return await self.store.asked_approvals(status, limit)

    async def decide_approval(self, approval_id: str, approve: bool, by: str, reason: str | None) -> Approval:
        """Decide a request and wake its run (I15): a waiting run is taken at once; one still running
        sees the decision when it would suspend, and the sweep takes any run left waiting with every
        request decided. The same decision by the same person again (a retry after the first answer
        was lost) is answered with the decision as it stands (I18, I19); any other is a Conflict, and so is
        a decision on a request withdrawn with its run, which ended first (issue 32: nothing is sent)."""
        decided = await self.store.decide(approval_id, "approved" if approve else "rejected", by, reason)
        if decided is None:
            # I20: "decided already" is answered once that decision is on the synchronous standby.
            existing = await self.store.approval(approval_id)
            if existing is None:
                raise NotFound("path.approval_id", f"no approval {approval_id}")
            run = await self.store.status(existing.run_id) if existing.status == "pending" else None
            raise Conflict("path.approval_id", undecided(approval_id, existing, None if run is None else run.status))
        await self.start(decided.run_id)
        return decided

    async def resume_restored(self, run_id: str, by: str, reason: str | None) -> dict[str, Any]:
        """I24: an operator lets a restored run go on: each write it holds, which can be neither read back nor
        sent under a key its vendor dedupes, is sent (the risk theirs), and the run woken as a decision wakes it.
        Conflict when the run waits for no such word (`runs stop` is the other way out)."""
        found = await self.store.resume_restored(run_id, by, reason or f"resumed by {by} after a restore")
        if found is None:
            raise NotFound("path.run_id", f"no run {run_id}")
        if not found["decided"]:
            raise Conflict("path.run_id", f"run {run_id} is {found['status']} and holds no write a restore left "
                           "for an operator to decide; nothing was changed")  # fmt: skip
        await self.start(run_id)
        status = await self.store.status(run_id)
        assert status is not None
        return {"id": run_id, "resumed": True, "writes_released": found["decided"], "status": status.status}

    async def give_input(self, run_id: str, answer: Answer, created_by: str | None = None) -> Answered:
        """The input for the question a waiting run asked (`request_input`), bound to that question (I18:
        `questions.py`), and the run woken to go on, here or wherever it is taken (a new attempt, not a
        loss). The same request again, however late, changes nothing and gets the run's status now; what
        came of it is the verdict, which the entry point answers in its own terms. `created_by` scopes
        the run as `get_run` does (NotFound)."""
        run = await self.get_run(run_id, created_by)
        if run is None:
            raise NotFound("path.run_id", f"no run {run_id}")
        found = await self.store.give_input(run_id, answer.text, answer.by, answer.answered_by, answer.question_id)
        verdict = judge(found, answer)
        taken = None
        if verdict is Verdict.GIVEN:
            # Only what this request gave wakes the run: a repeat never takes it (a run it woke before
            # goes on, or waits for its next question; one whose wake-up was lost is the sweep's).
            taken = await self.started(run_id)
        if taken is None:  # not taken here: its status is read
            status = await self.store.status(run_id)
            assert status is not None
            taken = status.status
        return Answered(verdict, found.id if found else answer.question_id, taken)

    async def waiting_for(self, run_id: str) -> list[Waiting]:
        """What a waiting run waits for: the questions it asked, then the calls held for approval."""
        return await self.store.waiting_for(run_id)

    async def ready(self) -> None:
        await self.store.ping()

    # ----- runs ------------------------------------------------------------------------------------

    async def create_run(
        self,
        agent: Agent,
        text: str,
        *,
        may_wait: bool | None = None,
        channel: str = "api",
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        parent_run_id: str | None = None,
        delegation_key: str | None = None,
        actor: str = "api",
        created_by: str | None = None,
        take: bool = False,
        traceparent: str | None = None,
    ) -> Created:
        """Insert the run with its first sealed checkpoint, in one statement. A repeated idempotency or
        delegation key returns the run the first request made, which its maker checks is its own
        (`run_keys.foreign`). `actor` is audited as the creator; `created_by` is the API token whose
        caller may read the run. With `take`, the same statement takes the run for this process (its
        lease and attempt 1, as `start` would) and it is driven here: `created_by`'s answer is its status."""
        run_id = str(uuid.uuid4())
        state = RunState(
            agent=agent.name,
            correlation_id=run_id,
            messages=[{"role": "system", "content": agent.system_prompt}, {"role": "user", "content": text}],
            # The run's trace continues its caller's (runtime/tracing.py), kept only when well formed.
            traceparent=tracing.parent_for_new_run(traceparent),
        )
        body = seal.canonical(state.to_json()).decode()
        mac, key_id = seal.seal(self.deps.keys, seal.Chain(run_id, 0, 0, 0, None), body)
        params = {
            "id": run_id, "agent": agent.name, "input": text, "owner": agent.owner, "tenant": agent.tenant,
            "channel": channel, "may_wait": agent.may_wait if may_wait is None else may_wait,
            "correlation_id": run_id, "parent_run_id": parent_run_id, "delegation_key": delegation_key,
            "idempotency_key": idempotency_key, "request_hash": request_hash, "state": body, "seal": mac,
            "key_id": key_id, "actor": actor, "created_by": created_by,
            "state_format": resume.THIS_RELEASE.state_format, "seal_format": resume.THIS_RELEASE.seal_format,
            "audit": {"agent": agent.name, "channel": channel, "parent_run_id": parent_run_id},
        }  # fmt: skip
        if take:
            sent_at = time.monotonic()  # I4: the lease's deadline runs from when the take was sent
            generation = self.deps.gate_watch.current()  # the facts the take reads are as new as this
            taken = await self.store.create_taken(params, self.deps.holder, self.deps.settings.lease_ttl_s)
            if taken is not None:
                made, checkpoint = taken
                self.launch(checkpoint, sent_at, facts_generation=generation)  # refused only while coming back
                return made
        elif (created := await self.store.create(params)) is not None:
            return created
        # I20: a run found by its key is answered only once it is on the synchronous standby.
        if idempotency_key is not None and (found := await self.store.by_idempotency_key(idempotency_key)):
            return found
        if delegation_key is not None and (found := await self.store.by_delegation_key(delegation_key)):
            return found
        raise TicketIQError(f"run {run_id} was neither created nor found; retry the request")

    async def start(self, run_id: str) -> bool:
        """Take a queued or waiting run and drive it here. False when another process has it, or this
        process is not admitting runs yet (the run stays queued for the sweep)."""
        return await self.started(run_id) is not None

    async def started(self, run_id: str) -> str | None:
        """As `start`; the run's status as the take left it (`running`, or `answered` while it hands on its
        kept answer, I12) when it is driven here, from the take itself: no read follows. None when not."""
        if not await self._admission():
            return None
        sent_at = time.monotonic()
        generation = self.deps.gate_watch.current()  # the facts the take reads are as new as this
        checkpoint = await self.store.acquire(run_id, self.deps.holder, self.deps.settings.lease_ttl_s)
        if checkpoint is None or not self.launch(checkpoint, sent_at, facts_generation=generation):
            return None
        return checkpoint.run_status

    async def _admission(self) -> bool:
        """Whether this process admits runs, waiting a while for it while it comes back under a new identity."""
        if not self.admitted.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(ADMISSION_WAIT_S):
                    await self.admitted.wait()
        return self.admitted.is_set()

    async def hand(self, run_id: str) -> bool:
        """Take a queued or waiting run for the least loaded live process: drive it here when that is
        this process, else that process is told to take it up (the leader's starts: orphaned queued runs,
        decided waits, cron fires, unstarted Teams turns). False when another process has it, or this
        process is not admitting runs (the run stays queued for the sweep)."""
        if not self.admitted.is_set():
            return False
        sent_at = time.monotonic()
        given = await self.store.hand(run_id, self.deps.holder, self.deps.settings.lease_ttl_s)
        if given is None:
            return False
        return self.give(given, sent_at)

    def give(self, given: Given, sent_at: float) -> bool:
        """A run a take of this process gave to `given.holder`: driven here when that is this process
        (a claim under its new attempt, I5, I6); another process takes it up itself."""
        if given.holder == self.deps.holder:
            return self.launch(given, sent_at, claimed=given.why in CLAIMED)
        log.info("run %s (%s) given to process %s under attempt %s", given.run_id, given.why, given.holder,
                 given.attempt)  # fmt: skip
        return True

    async def take_up(self) -> int:
        """Drive the runs other processes' takes gave this one, each under the attempt it was given by
        (I3); the statement renews their leases, so their deadlines run from when it was sent (I4).
        Returns how many were taken up."""
        if not self.admitted.is_set():
            return 0  # coming back under a new identity: the old one's runs are claimed again
        sent_at = time.monotonic()
        given = await self.store.take_up(self.deps.holder, self.deps.settings.lease_ttl_s, self.driving())
        for checkpoint in given:
            log.info("run %s (%s) taken up, attempt %s, losses %s", checkpoint.run_id, checkpoint.why,
                     checkpoint.attempt, checkpoint.losses)  # fmt: skip
            self.launch(checkpoint, sent_at, claimed=checkpoint.why in CLAIMED)
        return len(given)

    def launch(
        self, checkpoint: Checkpoint, sent_at: float, claimed: bool = False, facts_generation: int | None = None
    ) -> bool:
        """Drive a run this process just took, under the attempt it took it by (I5, I6). Refused while
        a driver of the run still drives here: the new lease is then not renewed and lapses.
        `facts_generation`: the gate listener's generation before the take was sent, when the take read
        the gates' facts (`checkpoint.facts`): the run starts from them instead of reading them again."""
        run_id = checkpoint.run_id
        if not self.admitted.is_set():
            # Taken under an identity whose liveness mark is gone: its lease lapses and is swept.
            log.error("run %s: attempt %s not driven, the process is coming back under a new identity",
                      run_id, checkpoint.attempt)  # fmt: skip
            return False
        current = self.drivers.get(run_id)
        if current is not None and not current.ended:
            log.error("run %s: attempt %s not driven, attempt %s still drives it in this process",
                      run_id, checkpoint.attempt, current.attempt)  # fmt: skip
            return False
        lease = self.deps.keeper.hold(run_id, sent_at, checkpoint.attempt)
        driver = RunDriver(self.deps, checkpoint, lease, claimed_at=sent_at if claimed else None,
                           facts_generation=facts_generation)  # fmt: skip
        previous = self.tasks.get(run_id)
        self.drivers[run_id] = driver
        self.tasks[run_id] = asyncio.create_task(self._drive(driver, previous), name=f"run-{run_id}")
        return True

    def driving(self) -> set[str]:
        """Runs with a driver still driving here: never claimed back by this process's sweeps."""
        return {run_id for run_id, driver in self.drivers.items() if not driver.ended}

    async def _drive(self, driver: RunDriver, previous: asyncio.Task[str] | None) -> str:
        # This task's own context: every record made while the attempt is driven names it (runtime/logs.py).
        logs.driving(driver.run_id, driver.attempt, self.deps.holder)
        if previous is not None and not previous.done():
            await asyncio.wait([previous])  # an ended driver's last moments: never two at once
        me = asyncio.current_task()
        driving = asyncio.ensure_future(driver.drive())
        lost = asyncio.ensure_future(driver.lease.lost.wait())
        try:
            await asyncio.wait([driving, lost], return_when=asyncio.FIRST_COMPLETED)
            if not driving.done():
                # The lease is lost (taken over, or our liveness mark is gone): nothing it could still
                # do may reach the database or a vendor, so the driver is stopped where it waits.
                driving.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await driving
                log.warning("run %s attempt %s stopped: lease lost (%s)", driver.run_id, driver.attempt,
                            driver.lease.why)  # fmt: skip
                return "lost"
            status = driving.result()
            log.info("run %s attempt %s: %s", driver.run_id, driver.attempt, status)
            if status == HANDED_OVER:
                self.handed_over.append((driver.run_id, driver.attempt))
            return status
        except Exception:
            # A bug or a database outage: the run's lease is no longer renewed and lapses, so a sweep
            # can take it over; this process writes nothing more for it.
            log.exception("run %s attempt %s: driver failed", driver.run_id, driver.attempt)
            return "lost"
        finally:
            for future in (lost, driving):
                future.cancel()
            await asyncio.wait([lost, driving])
            driver.ended = True
            self.deps.keeper.drop(driver.lease)  # only this attempt's lease
            if self.drivers.get(driver.run_id) is driver:
                self.drivers.pop(driver.run_id, None)
            if self.tasks.get(driver.run_id) is me:
                self.tasks.pop(driver.run_id, None)

    async def wait_terminal(self, run_id: str, timeout_s: float, poll_s: float = 0.2) -> RunStatus | None:
        """Wait until the run ends wherever it runs (read only); return its status row."""
        deadline = time.monotonic() + timeout_s
        while True:
            status = await self.store.status(run_id)
            if status is None or status.status in TERMINAL or time.monotonic() >= deadline:
                return status
            await asyncio.sleep(poll_s)

    async def shutdown(self, grace_s: float) -> list[tuple[str, int]]:
        """Hand the runs over: each driver stops at its next step boundary (a step in flight finishes,
        for the grace period at most, then is stopped where it waits); return (run, attempt) of every run
        stopped so, for the hand-back."""
        self.deps.handing_over.set()
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()), timeout=grace_s)
        held = [(d.run_id, d.attempt) for d in self.drivers.values() if not d.ended]
        for task in list(self.tasks.values()):
            task.cancel()
        for task in list(self.tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return [*self.handed_over, *held]
