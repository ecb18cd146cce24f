"""Making the calls of one step, and carrying out the plan for the calls a checkpointed step left.

A read is just made. A changing call is marked in doubt by one fenced statement committed before it is
sent (I2), which records how long it can be in flight (I14); it is sent inside its window and its
outcome recorded by one more statement, fenced by the attempt only. The calls of a step run
concurrently up to `call_concurrency`; a TaskGroup stops the others when one finds the run fenced off.

On resume every call is routed by `resume.plan` and carried out here, through every gate as it stands
now (I6, I15): a write resent, or sent after a read-back found nothing, passes the approval gate again.
Each call reports what happened to it, for the `agent.run.crash_resumed` audit (I8).

Times (the run's timeline): when a request went out and when its answer came back are taken here, on
this process's wall clock (`time.time()`, epoch seconds), and ride in the statement written next: a
read's and a refusal's in the finished rows of the next checkpoint, a write's in its outcome statement.
The in-doubt mark's time is the database's own (`calls.marked_at`).
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from opentelemetry.trace import Span

from ticketiq.engine import approvals, in_doubt, settlement, transcript
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.gates import GateDecision, GateFacts, Verdict, run_gate
from ticketiq.engine.in_doubt import Settled, Unknown
from ticketiq.engine.leases import HeldLease
from ticketiq.engine.resume import LeftCall
from ticketiq.engine.settlement import UNKNOWN_FOR_MODEL, Happened, Restored, Route, ToolNow
from ticketiq.engine.state import PlannedCall, RunState
from ticketiq.engine.step_keys import approval_key, fresh_key
from ticketiq.runtime import run_spans
from ticketiq.runtime.faults import Faults
from ticketiq.runtime.run_spans import AttemptTrace
from ticketiq.storage.rows import Approval
from ticketiq.storage.run_store import RunHandle
from ticketiq.tools.base import CallContext, Outcome, ReadBack, SendWindow, Tool, ToolClass
from ticketiq.tools.builtin import ENGINE_CALLS, REQUEST_INPUT
from ticketiq.tools.schema import validate
from ticketiq.values.storable import storable

UNCERTAIN = "unknown: the vendor's answer leaves it open whether the write took effect; not sent again"


@dataclass
class StepWork:
    """What one step's calls produced, gathered for the next statement."""

    results: dict[int, Any] = field(default_factory=dict)  # idx -> what goes back to the model
    finished: list[dict[str, Any]] = field(default_factory=list)  # reads and refusals: rows to land
    entries: list[dict[str, Any]] = field(default_factory=list)
    waiting: bool = False  # a call is held for a person: an approval or an input
    happened: dict[int, Happened] = field(default_factory=dict)
    asks: list[dict[str, Any]] = field(default_factory=list)  # questions for a person ({id, idx, question})
    approvals_held: int = 0
    held: list[str] = field(default_factory=list)  # why a restored run's writes wait for an operator (I24)


class Run(Protocol):
    """What the call maker needs of the run it makes calls for."""

    state: RunState
    trace: AttemptTrace | None  # the attempt's spans, while tracing is on
    step_span: Span | None

    async def gate_facts(self, fresh: bool = False) -> GateFacts: ...

    def decide(self, facts: GateFacts, call: PlannedCall, approved: bool = False) -> GateDecision: ...


class CallMaker:
    def __init__(self, deps: EngineDeps, handle: RunHandle, lease: HeldLease, run: Run) -> None:
        self.deps = deps
        self.handle = handle
        self.lease = lease
        # Weakly: the run (its driver) holds this maker and outlives every use of it. A strong reference back
        # made each run's objects (its state, its conversation, its checkpoint) a cycle that only the
        # garbage collector could free, some 17,000 objects in 3 s of bench/client.py's load.
        self.run = cast(Run, weakref.proxy(run))

    @property
    def step(self) -> int:
        return self.run.state.step

    # ----- a step's calls ---------------------------------------------------------------------------

    async def make(self, calls: list[tuple[PlannedCall, GateDecision]]) -> StepWork:
        work = StepWork()
        if len(calls) == 1:  # the common step: one call, made right here
            call, decision = calls[0]
            work.happened[call.idx] = await self._make(work, call, decision)
            return work
        await self._each([functools.partial(self._made, work, call, decision) for call, decision in calls])
        return work

    async def carry_out(self, left: list[LeftCall], facts: GateFacts) -> StepWork:
        """Carry out the plan for the calls a step left; `work.happened` says what became of each."""
        work = StepWork()
        await self._each([functools.partial(self._settle, work, item, facts) for item in left])
        return work

    async def _each(self, jobs: list[Callable[[], Awaitable[None]]]) -> None:
        if len(jobs) == 1:  # the common step: one call, no tasks to schedule
            await jobs[0]()
            return
        limit = asyncio.Semaphore(self.deps.settings.call_concurrency)

        async def bounded(job: Callable[[], Awaitable[None]]) -> None:
            async with limit:
                await job()

        # A TaskGroup cancels the step's other calls when one finds the run fenced off (I3).
        async with asyncio.TaskGroup() as group:
            for job in jobs:
                group.create_task(bounded(job))

    async def _made(self, work: StepWork, call: PlannedCall, decision: GateDecision) -> None:
        work.happened[call.idx] = await self._make(work, call, decision)

    async def _make(
        self,
        work: StepWork,
        call: PlannedCall,
        decision: GateDecision,
        key: str | None = None,
        approval: Approval | None = None,
    ) -> Happened:
        """Make one call through its gate decision: refuse it, hold it for a person, or send it. `key`:
        the key it must carry (an approved call's, `approval`)."""
        if call.args_error:
            return self.finish(work, call, {"error": f"arguments rejected: {call.args_error}"}, "refused")
        if decision.verdict is Verdict.REFUSE:
            await self.audit_refused_delegation(call, decision)
            return self.finish(work, call, {"refused": decision.reason, "gate": decision.gate}, "refused")
        if call.tool == REQUEST_INPUT.name:
            return await self._ask(work, call)
        happened = Happened.MADE
        if decision.verdict is Verdict.APPROVAL:
            approval = await self.file_approval(call)
            if approval.status == "pending":
                work.waiting = True
                work.approvals_held += 1
                return Happened.APPROVAL_FILED
            if approval.status != "approved":  # rejected; or withdrawn, which no driven run's request is
                refusal = {"refused": approvals.not_approved(approval), "gate": "approval"}
                return self.finish(work, call, refusal, "refused")
            key = approval_key(approval.id)  # I11: an approved call's key is the approval's
            happened = Happened.APPROVAL_DECIDED
        tool = self._tool(call.tool)
        assert tool is not None
        problem = validate(tool.parameters, call.args)
        if problem:
            return self.finish(work, call, {"error": f"arguments rejected: {problem}"}, "refused")
        if self.run.trace is not None:
            return await self._traced(work, call, tool, key, approval, happened)
        return await self._send(work, call, tool, key, approval, happened)

    async def _traced(self, work: StepWork, call: PlannedCall, tool: Tool, key: str | None,
                      approval: Approval | None, happened: Happened) -> Happened:  # fmt: skip
        """`_send` inside the call's span, which its request carries (traceparent)."""
        assert self.run.trace is not None
        sent_key = key or call.step_key or f"{self.step}/{call.idx}"
        span = self.run.trace.tool(self.run.step_span, self.step, call.tool, call.tool_class.value, call.id, sent_key)
        token = run_spans.current(span)
        try:
            done = await self._send(work, call, tool, key, approval, happened)
        except BaseException as exc:
            run_spans.failed(span, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            run_spans.detach(token)
        span.set_attribute("ticketiq.call.happened", done.value)
        span.end()
        return done

    async def _send(self, work: StepWork, call: PlannedCall, tool: Tool, key: str | None,
                    approval: Approval | None, happened: Happened) -> Happened:  # fmt: skip
        if not call.tool_class.changes:
            sent_at, began = time.time(), time.perf_counter()
            outcome = await tool.executor(self.context(tool, call, key or call.step_key or fresh_key()))
            self.deps.metrics.tool_call(call.tool, str(call.tool_class), time.perf_counter() - began)
            result = self.clean(outcome.for_model(), call, work.entries)
            self.finish(work, call, result, "read", ok=outcome.ok, sent_at=sent_at)
            return happened
        # A Stop or a quarantine may have landed since the step's gates were read: writes look afresh.
        facts = await self.run.gate_facts(fresh=True)
        now = run_gate(facts)
        if not now.allowed:
            work.entries.append(transcript.gate(self.step, call, now))
            return self.finish(work, call, {"refused": now.reason, "gate": now.gate}, "refused")
        if facts.restored_at is not None:
            # I24: restored unfinished, the run may have sent this very call after the backup was taken.
            return await self._restored(work, call, tool, key, approval, facts) or happened
        await self.send_write(work, call, tool, key or call.step_key or fresh_key())
        return happened

    async def audit_refused_delegation(self, call: PlannedCall, decision: GateDecision) -> None:
        """A delegation its run's starter could not have started is audited (its refusal reaches the model
        as the call's result, as every refusal does): an operator sees who tried to reach what."""
        if decision.gate != "delegation":
            return
        await self.handle.audit("agent.delegation.refused", self.deps.holder, {
            "step": self.step, "idx": call.idx, "agent": str(call.args.get("agent", "")), "reason": decision.reason,
        })  # fmt: skip

    def _tool(self, name: str) -> Tool | None:
        """The tool a call names: a vendor's, or a write the engine makes itself (ENGINE_CALLS: the driver's
        gate decision refuses a model's call of one before it gets here)."""
        return ENGINE_CALLS.get(name) or self.deps.registry.get(name)

    async def _ask(self, work: StepWork, call: PlannedCall) -> Happened:
        """The model's question to a person: answered by the input given to it, else the run waits for
        one (the question is filed by the statement that makes the run wait, so no input can come
        before the run waits for it)."""
        given = await self.handle.input_for(self.step, call.idx)
        if given is not None and given.status == "given":
            return self.finish(work, call, {"input": given.text, "given_by": given.given_by}, "read", ok=True)
        work.waiting = True
        question = str(call.args.get("question") or "")
        work.asks.append({"id": given.id if given else str(uuid.uuid4()), "idx": call.idx, "question": question})
        return Happened.INPUT_ASKED

    def finish(
        self, work: StepWork, call: PlannedCall, result: Any, how: str, ok: bool = False, sent_at: float | None = None
    ) -> Happened:
        """A read or a refusal: its row and note land with the next statement, not one of their own, with
        its times (this process's wall clock: `sent_at` when a read went out, and now, when it ended)."""
        step = self.run.state.step
        work.results[call.idx] = result
        work.finished.append(
            {
                "step": step,
                "idx": call.idx,
                "id": call.id,
                "tool": call.tool,
                "class": str(call.tool_class),
                "step_key": call.step_key,
                "args": call.args,
                "gate": "allow" if how == "read" else "refuse",
                "outcome": {"result": result},
                "how": how,
                "sent_at": sent_at,
                "outcome_at": time.time(),
            }
        )
        work.entries.append(transcript.call_result(step, call, None, ok or how == "read", result, how))
        return Happened.REFUSED if how == "refused" else Happened.MADE

    # ----- writes -----------------------------------------------------------------------------------

    async def send_write(self, work: StepWork, call: PlannedCall, tool: Tool, sent_key: str) -> None:
        """A write made now: the in-doubt protocol's send (engine/in_doubt.py); its result lands in `work`."""
        await in_doubt.send(CallWrite(self, work, call, tool, sent_key))

    async def _restored(
        self, work: StepWork, call: PlannedCall, tool: Tool, key: str | None, approval: Approval | None,
        facts: GateFacts,
    ) -> Happened | None:  # fmt: skip
        """I24: a write of a run restored unfinished from a backup, which may have sent this very call after
        the backup was taken: settled as a call in doubt is before it is sent (`settlement.decide_restored`); one that
        cannot be waits for an operator, asked why. None: sent as planned (the caller's happened stands)."""
        assert facts.restored_at is not None
        if key is None:
            key, stable = call.step_key or fresh_key(), call.step_key is not None
        else:
            # An approved call's key is the approval's: one the vendor may have seen only when the approval
            # is older than the restore (one filed since has an id nothing was sent under before).
            stable = approval is not None and approval.created_at < facts.restored_at
        now = ToolNow(exists=True, has_reader=tool.reader is not None, dedupe_window_s=tool.dedupe_window_s)
        run_id, step = self.handle.run_id, self.step
        bound_by = approvals.restore_binding(run_id, step, call.idx, call.tool, call.step_key, call.args)
        hold = approvals.for_call(await self.handle.approvals_for_step(step), bound_by)
        decided = settlement.decide_restored(call.tool_class, now, key, stable, hold.status if hold else None)
        if decided.what is Restored.HOLD:
            why = settlement.hold_reason(call.tool, step, call.idx, facts.restored_from, now, stable)
            hold = await self.file_approval(call, bound_by, why)
            decided = settlement.decide_restored(call.tool_class, now, key, stable, hold.status)
            if decided.what is Restored.HOLD:
                work.waiting = True
                work.approvals_held += 1
                work.held.append(why)
                return Happened.APPROVAL_FILED
        if decided.what is Restored.REFUSE:
            assert hold is not None
            return self.finish(work, call, {"refused": approvals.not_approved(hold), "gate": "restore"}, "refused")
        if decided.what is Restored.SEND:  # the operator's word: sent once, the risk theirs
            await self.send_write(work, call, tool, key)
            return None
        assert decided.route is not None
        write = CallWrite(self, work, call, tool, key)
        if decided.route is Route.READ_BACK:
            await write.mark()  # I2: what the read-back finds, or the send it leads to, lands in this row
        settled = await in_doubt.settle(write, decided.route)
        await self.handle.audit("agent.call.settled_after_restore", self.deps.holder, {
            "step": step, "idx": call.idx, "tool": call.tool, "class": call.tool_class.value, "key": key,
            "route": decided.route.value, "happened": settled.happened.value,
        })  # fmt: skip
        return settled.happened

    def clean(self, value: Any, call: PlannedCall, entries: list[dict[str, Any]]) -> Any:
        """What a tool or vendor answered, fit for a transcript and for Postgres: secrets a vendor
        echoed are masked, and text Postgres cannot store is replaced, with a note saying so (I16)."""
        value, altered = storable(transcript.scrub(value, self.deps.settings.secrets()))
        if altered:
            entries.append(transcript.text_altered(self.step, f"the result of {call.tool} (call {call.idx})"))
        return value

    async def record(
        self,
        call: PlannedCall,
        result: Any,
        status: str,
        how: str,
        key: str | None,
        ok: bool,
        extra: list[dict[str, Any]] | None = None,
        times: tuple[float, float] | None = None,
    ) -> None:
        """I2: the outcome, fenced by the attempt only: no lease deadline check, so an answer that came
        back after the deadline is kept unless the run was taken over (then the statement is refused).
        `times`: when the request went out and its answer came back (this process's wall clock); without,
        a settlement that sent nothing, ended now."""
        sent_at, outcome_at = times if times is not None else (None, time.time())
        entries = [
            *(extra or []),
            transcript.call_result(self.step, call, key, ok, result, how),
            transcript.statement("outcome", step=self.step, idx=call.idx, tool=call.tool),
        ]
        await self.handle.record_outcome({
            "step": self.step, "idx": call.idx, "status": status, "outcome": {"result": result},
            "settlement": how, "entries": entries, "sent_at": sent_at, "outcome_at": outcome_at,
        })  # fmt: skip

    def context(
        self,
        tool: Tool,
        call: PlannedCall,
        key: str,
        window: SendWindow | None = None,
        reference: str | None = None,
    ) -> CallContext:
        """`window`: a write being sent, which may record what it can be found again by; `reference`: what
        such a write recorded, for its reader."""
        return CallContext(
            run_id=self.handle.run_id,
            tool=tool.name,
            args=call.args,
            key=key,
            http=self.deps.http,
            settings=self.deps.settings,
            before_send=self.lease.check,
            lost=self.lease.lost,
            window=window,
            reference=reference,
            on_reference=None if window is None else self._reference_recorder(call.idx),
        )

    def _reference_recorder(self, idx: int) -> Callable[[str], Awaitable[None]]:
        """Records what the call `idx` of this step can be found again by, the moment its vendor names it
        (I9), fenced by the attempt (I3)."""
        step, handle = self.step, self.handle

        async def record(ref: str) -> None:
            # I16: an id Postgres cannot store could not find the call again either: it is not recorded,
            # so the call settles as unknown (never sent again) if it is left in doubt.
            _, altered = storable(ref)
            if not altered:
                await handle.record_reference(step, idx, ref)

        return record

    async def file_approval(
        self, call: PlannedCall, bound_by: str | None = None, asked_why: str | None = None
    ) -> Approval:
        """I15: file (or find) the request bound to exactly this call: the approval gate's, or (`bound_by`,
        `asked_why`) the operator's word a restored run's write waits on (I24)."""
        if bound_by is None:
            bound_by = approvals.binding(self.handle.run_id, self.step, call.idx, call.tool, call.step_key, call.args)
        return await self.handle.file_approval({
            "id": str(uuid.uuid4()), "step": self.step, "idx": call.idx, "tool": call.tool, "args": call.args,
            "step_key": call.step_key, "binding": bound_by, "asked_why": asked_why,
        })  # fmt: skip

    # ----- the calls a step left ------------------------------------------------------------------

    async def _settle(self, work: StepWork, item: LeftCall, facts: GateFacts) -> None:
        work.happened[item.call.idx] = await self._carry(work, item, facts)

    async def _carry(self, work: StepWork, item: LeftCall, facts: GateFacts) -> Happened:
        call = item.call
        if item.route is Route.REUSE:
            assert item.row is not None
            work.results[call.idx] = (item.row.outcome or {}).get("result")
            return Happened.REUSED
        if item.route is Route.MAKE:
            return await self._make(work, call, self.run.decide(facts, call))
        if item.route is Route.APPROVAL_DECIDED:
            assert item.approval is not None
            if item.approval.status != "approved":
                refusal = {"refused": approvals.not_approved(item.approval), "gate": "approval"}
                return self.finish(work, call, refusal, "refused")
            decision = self.run.decide(facts, call, approved=True)
            # I11: an approved call's key is the approval's, however often it is sent.
            happened = await self._make(work, call, decision, approval_key(item.approval.id), item.approval)
            return Happened.APPROVAL_DECIDED if happened is Happened.MADE else happened
        return await self._in_doubt(work, item, facts)

    async def _in_doubt(self, work: StepWork, item: LeftCall, facts: GateFacts) -> Happened:
        """A write in doubt: it may or may not have reached its vendor. Never blindly sent again (I9):
        settled by the in-doubt protocol (engine/in_doubt.py) as its route says."""
        call, row = item.call, item.row
        assert row is not None
        tool = self._tool(call.tool)
        key = row.sent_key
        if tool is None or key is None:  # nothing to send it with again, or no key to send it under
            work.results[call.idx] = await self._unknown(call, key, None, Happened.UNKNOWN_NOT_SENT)
            return Happened.UNKNOWN_NOT_SENT
        settled = await in_doubt.settle(CallWrite(self, work, call, tool, key, item, facts), item.route)
        return settled.happened

    async def _unknown(self, call: PlannedCall, key: str | None, why: str | None, happened: Happened) -> Any:
        result = {"outcome": "unknown", "message": UNKNOWN_FOR_MODEL + (f" ({why})" if why else "")}
        await self.record(call, result, "settled", happened.value, key, False)
        await self.handle.audit("agent.call.settled_unknown", self.deps.holder, {
            "idx": call.idx, "tool": call.tool, "class": call.tool_class.value, "key": key, "step": self.step,
            "why": why, "happened": happened.value,
        })  # fmt: skip
        return result


@dataclass
class CallWrite:
    """A run's tool call as the in-doubt protocol's write (engine/in_doubt.py): marked, and its outcome
    recorded, by the run handle's statements, fenced by the run's attempt (I3); read back by its tool's
    reader. Its result lands in the step's `work`. `left` and `facts`: a call a checkpointed step left,
    being settled (its I14 wait was read with its row, on the database clock)."""

    maker: CallMaker
    work: StepWork
    call: PlannedCall
    tool: Tool
    key: str
    left: LeftCall | None = None
    facts: GateFacts | None = None

    @property
    def marked(self) -> ToolClass:
        return self.call.tool_class

    @property
    def budget_s(self) -> float:
        return self.maker.deps.settings.write_budget_s

    @property
    def faults(self) -> Faults:
        return self.maker.deps.faults

    @property
    def lost(self) -> asyncio.Event:
        return self.maker.lease.lost

    def check(self) -> None:
        self.maker.lease.check()

    def lease_deadline(self) -> float:
        return self.maker.lease.deadline

    async def mark(self) -> None:
        maker, call, settings = self.maker, self.call, self.maker.deps.settings
        mark = transcript.statement(
            "in_doubt", step=maker.step, idx=call.idx, tool=call.tool, cls=call.tool_class.value, key=self.key
        )
        await maker.handle.mark_in_doubt({
            "step": maker.step, "idx": call.idx, "provider_call_id": call.id, "tool": call.tool,
            "class": call.tool_class.value, "step_key": call.step_key, "sent_key": self.key, "args": call.args,
            "entries": [mark], "budget": settings.write_budget_s, "request_timeout": settings.http_timeout_s,
        })  # fmt: skip

    async def send(self, window: SendWindow) -> tuple[Outcome, float, float]:
        """The outcome, with when it went out and came back (this process's clocks: the timeline's)."""
        maker, call = self.maker, self.call
        sent_at, began = time.time(), time.perf_counter()
        outcome = await self.tool.executor(maker.context(self.tool, call, self.key, window))
        outcome_at = time.time()
        maker.deps.metrics.tool_call(call.tool, call.tool_class.value, time.perf_counter() - began)
        return outcome, sent_at, outcome_at

    def reopens(self, answer: tuple[Outcome, float, float], how: str | None) -> Route | None:
        return None  # an open outcome is recorded as such (UNCERTAIN); the model is told, nothing is resent

    async def record(self, answer: tuple[Outcome, float, float], how: str | None) -> Any:
        outcome, sent_at, outcome_at = answer
        notes_of_text: list[dict[str, Any]] = []
        result = self.maker.clean(outcome.for_model(), self.call, notes_of_text)
        if outcome.uncertain:
            result = {"error": result.get("error") if isinstance(result, dict) else None, "outcome": UNCERTAIN}
        how = how or "sent"  # None: a first send
        await self.maker.record(
            self.call, result, "done", how, self.key, outcome.ok, notes_of_text, (sent_at, outcome_at)
        )
        self.work.results[self.call.idx] = result
        return result

    async def in_flight_s(self) -> float:
        # Without a left call, a restored run's write (I24): whatever sent it lived in the world the restore
        # threw away, whose processes were stopped before it (docs/operate.md); nothing of it is in flight.
        return 0.0 if self.left is None else self.left.wait_s

    async def read_back(self) -> ReadBack:
        assert self.tool.reader is not None
        reference = self.left.row.remote_ref if self.left is not None and self.left.row is not None else None
        return await self.tool.reader(self.maker.context(self.tool, self.call, self.key, reference=reference))

    async def found(self, read: ReadBack) -> Any:
        landed = read.outcome.for_model() if read.outcome else {"landed": True}
        notes_of_text: list[dict[str, Any]] = []
        result = self.maker.clean(landed, self.call, notes_of_text)
        await self.maker.record(self.call, result, "settled", Happened.FOUND.value, self.key, True, notes_of_text)
        self.work.results[self.call.idx] = result
        return result

    async def unknown(self, why: Unknown) -> Any:
        said = None if why is Unknown.NO_WAY else why.value
        result = await self.maker._unknown(self.call, self.key, said, Happened.UNKNOWN_NOT_SENT)
        self.work.results[self.call.idx] = result
        return result

    async def gate(self) -> Settled[Any] | None:
        """Sent again (a keyed resend, a delegation asked again, or a write read back and not there):
        through the approval gate as it stands now, an approval of this very call counting (I15). A restored
        run's write (no left call) passed its gates the moment before it was settled (`_make`)."""
        if self.left is None:
            return None
        assert self.facts is not None
        maker, work, call, facts, approval = self.maker, self.work, self.call, self.facts, self.left.approval
        approved = approval is not None and approval.status == "approved"
        gate = maker.run.decide(facts, call, approved=approved)
        if gate.verdict is Verdict.APPROVAL:
            filed = await maker.file_approval(call)
            if filed.status == "pending":
                work.waiting = True
                work.approvals_held += 1
                return Settled(Happened.APPROVAL_FILED, None)  # no result yet: the call waits for a person
            approved = filed.status == "approved"
            gate = maker.run.decide(facts, call, approved=approved) if approved else GateDecision(
                Verdict.REFUSE, "approval", approvals.not_approved(filed)
            )  # fmt: skip
        if gate.verdict is Verdict.ALLOW:
            return None
        await maker.audit_refused_delegation(call, gate)
        why = f"not sent again: {gate.reason}"
        work.results[call.idx] = await maker._unknown(call, self.key, why, Happened.REFUSED)
        return Settled(Happened.REFUSED, work.results[call.idx])
