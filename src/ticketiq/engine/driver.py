"""One run under one attempt: the loop of model steps and calls, every statement through the run store.

The loop: ask the model; if it answers with calls, write the sealed checkpoint (I1, one statement),
then make the calls (`calls.CallMaker`). Every statement goes through the run handle, which fences it
by the attempt and stops the run at once when it matches nothing (I3). A run that goes on from a
checkpointed step (after a takeover, a decision, or decisions made before it could suspend) routes
the calls the step left by `resume.plan` and carries the plan out here.

Times for the run's timeline are taken here, where things happen, and ride in the statements the step
writes anyway: when the model call began (this process's wall clock, `time.time()`) and how long it took
(`time.perf_counter()`) go in the step's `model_step` note, sealed in its checkpoint.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any

import orjson
from opentelemetry.trace import Span

from ticketiq.engine import resume, seal, transcript
from ticketiq.engine.calls import CallMaker, StepWork
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.gates import (
    GateDecision,
    GateFacts,
    Verdict,
    call_gate,
    delegation_gate,
    ending,
    input_gate,
    run_gate,
)
from ticketiq.engine.leases import HeldLease
from ticketiq.engine.settlement import Happened, ToolNow
from ticketiq.engine.state import PlannedCall, RunState
from ticketiq.engine.state_text import StateText
from ticketiq.engine.step_keys import run_call_key
from ticketiq.errors import Fenced, LeaseLost, ModelError, SealInvalid, StorageError
from ticketiq.model.wire import ModelReply
from ticketiq.runtime import lost_spans, run_spans, tracing
from ticketiq.storage.rows import Checkpoint
from ticketiq.storage.run_store import Flush, Sealed, SealedAnswer
from ticketiq.storage.timeline_store import TimelineStore
from ticketiq.tools.base import ToolClass
from ticketiq.tools.builtin import ENGINE_CALLS, REQUEST_INPUT
from ticketiq.values.storable import storable

log = logging.getLogger(__name__)

# Transcript entries and the rows of finished reads wait in the sealed checkpoint (durable, so a
# resume flushes them) and are written to their tables by the next statement that flushes: a step with
# a changing call, the end of the run, or once this many entries or this much time have gathered. A
# fast read-only step so costs one plain UPDATE of its checkpoint row.
FLUSH_ENTRIES = 16
# What drive() returns when it stopped at a step boundary because its process hands its runs over.
HANDED_OVER = "handed_over"
# What drive() returns for a checkpoint of a format this release does not know (resume.format_unknown).
LEFT = "left"
FLUSH_AGE_S = 1.0


def fenced_off(exc: BaseException) -> BaseException | None:
    """The Fenced or LeaseLost that stops the run quietly (I3), also when it comes from inside a
    step's TaskGroup as an exception group made of nothing else; None for anything else."""
    if isinstance(exc, Fenced | LeaseLost):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        matched, rest = exc.split((Fenced, LeaseLost))
        if rest is None and matched is not None:
            first: BaseException = matched
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            return first
    return None


class RunDriver:
    def __init__(
        self,
        deps: EngineDeps,
        checkpoint: Checkpoint,
        lease: HeldLease,
        claimed_at: float | None = None,
        facts_generation: int | None = None,
    ) -> None:
        self.deps = deps
        self.checkpoint = checkpoint
        self.run_id = checkpoint.run_id
        self.attempt = checkpoint.attempt
        self.losses = checkpoint.losses
        self.lease = lease
        self.claimed_at = claimed_at  # set when this attempt took the run over from a lost one
        self.handle = deps.store.bound(self.run_id, self.attempt)
        self.seal_head = checkpoint.seal  # the seal the next checkpoint write replaces (I17)
        self.calls = CallMaker(deps, self.handle, lease, self)
        # Finished reads' and refusals' rows, and their notes, ride on the next statement the run writes anyway.
        self.carried_rows: list[dict[str, Any]] = []
        self.carried_notes: list[dict[str, Any]] = []
        self.ended = False
        # Replaced by the verified checkpoint's state before anything reads it (a plain attribute, not a
        # property: it is read many times a step).
        self.state = RunState(agent="", correlation_id="")
        self._unflushed_since: float | None = None
        self._text = StateText()  # the checkpoint's text, its conversation serialized once per entry
        self._opened = False  # this attempt wrote its first checkpoint
        # The gates' facts the take read in its own statement (acquire, create_taken): the first fresh read
        # is that one; None when the take read none (claims, hand-offs), or no listener tags them.
        self._facts: GateFacts | None = checkpoint.facts if facts_generation is not None else None
        self._facts_generation: int | None = facts_generation
        self._taken_facts = self._facts is not None
        self.trace: run_spans.AttemptTrace | None = None  # this attempt's spans, while tracing is on
        self.step_span: Span | None = None  # the span of the step under way

    # ----- the loop -------------------------------------------------------------------------------

    async def drive(self) -> str:
        """Run to an end; return the status it ended in ('lost' when fenced off)."""
        ended = "error"
        try:
            ended = await self._drive()
            return ended
        except BaseException as exc:
            stop = fenced_off(exc)
            if stop is None:
                if isinstance(exc, StorageError) and not exc.retryable:
                    ended = await self._fail_for_good(exc)
                    return ended
                raise
            # I3: taken over (or our lease lapsed): stop now, make no call, write nothing more.
            log.warning("run %s attempt %s stops: %s", self.run_id, self.attempt, stop)
            ended = "lost"
            return ended
        finally:
            self.ended = True
            if self.trace is not None:
                if self.step_span is not None:
                    self.step_span.end()
                self.trace.end(ended)

    async def _drive(self) -> str:
        left = resume.format_unknown(self.checkpoint.state_format, self.checkpoint.seal_format)
        if left is not None:
            # A newer release wrote it: not failed, not rewritten. The takes give such a checkpoint only to
            # a process that knows it (take_run); should one come here all the same, nothing is written
            # and its lease lapses to the sweep, which gives it to a process that knows it or leaves it.
            log.warning("run %s attempt %s left for a newer release: %s", self.run_id, self.attempt, left)
            return LEFT
        try:
            self.state = await self._verified_state()
        except SealInvalid as exc:
            self.lease.releasing = True
            await self.handle.fail(str(exc), "agent.run.checkpoint_rejected", self.deps.holder)
            self._count_end("failed")
            return "failed"
        state = self.state
        if tracing.ON:
            self.trace = run_spans.AttemptTrace(self.run_id, self.attempt, state.agent, state.traceparent,
                                                  self.deps.holder)  # fmt: skip
        limit = self.deps.settings.max_losses
        if self.claimed_at is not None and self.losses > limit:
            # I7: lost more often than the limit: failed with the reason, and the transcript is told.
            self.deps.metrics.lost()
            return await self._end("failed", error=f"the run was lost {self.losses} times, more than the "
                                   f"limit of {limit}; it is not resumed again")  # fmt: skip
        agent = self.deps.catalog.get(state.agent)
        if agent is None:
            return await self._end("failed", error=f"agent {state.agent} is no longer defined")
        # I6: containment, Stop, channel and run-as (the owner may still run it) pass again.
        facts = await self.gate_facts(fresh=True)
        if self.attempt == 1:  # the run's first take: it starts now
            self.deps.metrics.run_started(state.agent, facts.channel)
        blocked = run_gate(facts)
        if not blocked.allowed:
            return await self._end(ending(blocked), error=f"refused by the {blocked.gate} gate: {blocked.reason}")
        if self.claimed_at is not None:
            # I13: an entry run that may not wait is resumed only while TICKETIQ_CRASH_RESUME_ENTRIES says so.
            why = resume.not_resumed(facts.channel, facts.may_wait, self.deps.settings.crash_resume_entries)
            if why is not None:
                return await self._end("failed", error=why)
            self.deps.metrics.recovery.observe(time.monotonic() - self.claimed_at)
        if state.answer is not None:
            # I12: the model answered and the answer is kept: only its hand-on is left. The model is not
            # asked again and nothing the run wrote is repeated.
            if self.claimed_at is not None:
                await self._audit_resumed([], StepWork(), handing_on=True)  # I8: every resume is audited
            return await self._hand_on_kept()
        if state.step > 0:
            # I17: seal the checkpoint under this attempt before anything else is written; the same
            # statement lands what a lost attempt wrote ahead, before anything of this one.
            await self._write_checkpoint(
                [transcript.statement("checkpoint", step=state.step, resealed=True)], flush=True
            )
        if state.calls:
            waiting = await self._go_on(await self._route_left(audit=self.claimed_at is not None))
            if waiting:
                return "waiting"
        elif self.claimed_at is not None:
            await self._audit_resumed([], StepWork())
        tools = self.deps.registry.specs(list(agent.tools))
        if facts.may_wait:
            tools.append(REQUEST_INPUT.openai_spec())  # a run that may wait may ask a person for input
        model = agent.model or self.deps.settings.model
        while True:
            if self.deps.handing_over.is_set():
                # The step before is whole: its writes are in the ledger, its reads ride on the next
                # statement, which the process the run is handed to writes after reading them again.
                return HANDED_OVER
            self.lease.check()
            began, started_at = time.perf_counter(), time.time()  # this process's clocks: metric, timeline
            try:
                reply = await self._ask_model(model, tools)
            except ModelError as exc:
                return await self._end("failed", error=f"model step {state.step + 1} failed: {exc}")
            model_s = time.perf_counter() - began
            self.deps.metrics.model_call(state.agent, model_s)
            timing = transcript.Timing(self.attempt, started_at, model_s)
            message, altered = storable(reply.message)  # I16: model text is made storable first
            text = storable(reply.text)[0] if altered else reply.text  # the text is the message's
            state.prompt_tokens += reply.prompt_tokens
            state.completion_tokens += reply.completion_tokens
            state.messages.append(message)
            if not reply.tool_calls:
                state.answer = storable(text or "")[0]
                state.calls = []
                self.deps.faults.hit("before_answer")
                tokens = reply.prompt_tokens + reply.completion_tokens
                extra = [transcript.model_answer(state.step + 1, tokens, timing)]
                extra += [transcript.text_altered(state.step + 1, "the model's answer")] if altered else []
                self.deps.metrics.step(state.agent, model_s)
                if resume.hands_on(facts.channel):
                    return await self._answer(state.answer, extra)
                return await self._end("succeeded", answer=state.answer, extra=extra)
            state.step += 1
            state.calls = [self._plan(i, tc) for i, tc in enumerate(reply.tool_calls)]
            altered = altered or any([c.args_altered for c in state.calls])
            state.history.append({"step": state.step, "calls": [c.tool for c in state.calls]})
            facts = await self.gate_facts()
            blocked = run_gate(facts)
            if not blocked.allowed:
                return await self._end(ending(blocked), error=f"refused by the {blocked.gate} gate: {blocked.reason}")
            decisions = [self.decide(facts, c) for c in state.calls]
            tokens = reply.prompt_tokens + reply.completion_tokens
            entries = [transcript.model_step(state.step, state.calls, text, tokens, timing)]
            if altered:
                entries.append(transcript.text_altered(state.step, "the model's step"))
            entries += [transcript.gate(state.step, c, d) for c, d in zip(state.calls, decisions, strict=True)]
            changing = any(
                c.tool_class.changes and d.verdict is not Verdict.REFUSE
                for c, d in zip(state.calls, decisions, strict=True)
            )
            await self._write_checkpoint(entries, flush=changing)
            self.deps.faults.hit("after_checkpoint")
            work = await self.calls.make(list(zip(state.calls, decisions, strict=True)))
            if not work.waiting:
                self.deps.metrics.step(state.agent, time.perf_counter() - began)
                self._absorb(work)  # the common step: nothing held for a person
            elif await self._go_on(work):
                return "waiting"

    async def _ask_model(self, model: str, tools: list[dict[str, Any]]) -> ModelReply:
        """The model's next step; traced, the step's span begins here and its model call is a span of it."""
        ask = functools.partial(self.deps.model.complete, model=model, messages=self.state.messages, tools=tools)
        if self.trace is None:
            return await ask()
        if self.step_span is not None:
            self.step_span.end()  # the step before, whole
        self.step_span = self.trace.step(self.state.step + 1)
        return await self.trace.chatting(self.step_span, self.state.step + 1, model, ask)

    async def _go_on(self, work: StepWork) -> bool:
        """After a step's calls: wait for a person while a request is pending, else go on. When every
        request was decided before the run could wait (I15), the step's calls are routed again here,
        under this attempt. True when the run now waits."""
        while work.waiting:
            if await self._suspend(work):
                return True
            work = await self._route_left(audit=False)
        self._absorb(work)
        return False

    async def _route_left(self, audit: bool) -> StepWork:
        """Route again the calls the checkpointed step left (I6, I9, I10, I14, I15) and carry them out."""
        state = self.state
        rows = {r.idx: r for r in await self.handle.calls_for_step(state.step)}
        filed = await self.handle.approvals_for_step(state.step)
        left = resume.plan(self.run_id, state.calls, rows, filed, self._tool_now, state.step)
        work = await self.calls.carry_out(left, await self.gate_facts(fresh=True))
        if audit:
            await self._audit_resumed(left, work)
        return work

    def _absorb(self, work: StepWork) -> None:
        """The step's results go back into the conversation; its finished rows ride on the next statement."""
        for call in self.state.calls:
            result = work.results.get(call.idx, {"error": "no result"})
            self.state.messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": orjson.dumps(result, default=str).decode()}
            )
        self.carried_rows += work.finished
        self.carried_notes += work.entries

    # ----- planning and gates ------------------------------------------------------------------------

    def _plan(self, idx: int, tool_call: Any) -> PlannedCall:
        state = self.state
        # I16: what the model said of the call, made storable in one check.
        said, altered = storable([tool_call.id, tool_call.name, tool_call.arguments, tool_call.arguments_error])
        call_id, name, args, args_error = said
        tool = REQUEST_INPUT if name == REQUEST_INPUT.name else self.deps.registry.get(name)
        return PlannedCall(
            idx=idx,
            id=call_id,
            tool=name,
            tool_class=tool.tool_class if tool else ToolClass.READ,
            args=args,
            # I11: from the correlation id, the agent loop, the steps taken and the provider's id.
            step_key=run_call_key(state.correlation_id, state.agent_loop, state.step, call_id),
            args_error=args_error,
            args_altered=altered,
        )

    def _tool_now(self, name: str) -> tuple[ToolNow, ToolClass | None]:
        tool = REQUEST_INPUT if name == REQUEST_INPUT.name else self.deps.registry.get(name)
        now = ToolNow(
            exists=tool is not None,
            has_reader=bool(tool and tool.reader),
            dedupe_window_s=tool.dedupe_window_s if tool else None,
        )
        return now, tool.tool_class if tool else None

    def decide(self, facts: GateFacts, call: PlannedCall, approved: bool = False) -> GateDecision:
        if call.tool == REQUEST_INPUT.name:
            return input_gate(facts)
        if call.tool in ENGINE_CALLS:
            return self._engine_call_gate(facts, call)
        agent = self.deps.catalog.get(self.state.agent)
        offered = frozenset(agent.tools) if agent else frozenset()
        if self.deps.registry.get(call.tool) is None:
            return GateDecision(Verdict.REFUSE, "tools", f"no tool named {call.tool}")
        decision = call_gate(facts, call.tool, offered, approved=approved)
        if decision.verdict is not Verdict.REFUSE and call.tool_class is ToolClass.DELEGATION:
            # Refused before the child exists, an approval or not: the starter could not start it itself.
            target = str(call.args.get("agent", ""))
            delegated = delegation_gate(facts, target, self.deps.catalog.get(target) is not None)
            if not delegated.allowed:
                return delegated
        return decision

    def _engine_call_gate(self, facts: GateFacts, call: PlannedCall) -> GateDecision:
        """A write the engine makes for its entry point (a Teams turn's reply): only once the answer is
        kept (I12), through the run gate alone (a Stop, a quarantine, the channel, run-as); a model
        asking for one is refused."""
        if self.state.answer is None:
            return GateDecision(Verdict.REFUSE, "tools", f"{call.tool} is made by the engine, never asked for")
        return run_gate(facts)

    async def gate_facts(self, fresh: bool = False) -> GateFacts:
        """The gates' facts for this run: cached until the gate listener reports a change."""
        generation = self.deps.gate_watch.current()
        cached = self._facts is not None and generation is not None and generation == self._facts_generation
        taken, self._taken_facts = self._taken_facts, False
        if cached and (taken or not fresh) and self._facts is not None:
            return self._facts  # fresh as well when the take itself read them and nothing changed since
        self._facts = await self.handle.gate_facts()
        self._facts_generation = generation
        return self._facts

    # ----- statements ---------------------------------------------------------------------------------

    async def _verified_state(self) -> RunState:
        """I6, I17: the seal, the counters it covers, and no row written after this checkpoint."""
        cp = self.checkpoint
        chain = seal.Chain(self.run_id, cp.step, cp.sealed_attempt, cp.sealed_losses, cp.prev_seal)
        seal.verify(self.deps.keys, chain, cp.state, cp.seal, cp.key_id, cp.seal_format)
        seal.check_counters(self.run_id, cp.attempt, cp.losses, cp.sealed_attempt, cp.sealed_losses)
        if cp.step > 0 and await self.handle.rows_after_head(cp.step, cp.sealed_attempt):
            raise SealInvalid(self.run_id, "the run wrote rows after this checkpoint: it was rolled back")
        return RunState.from_json(json.loads(cp.state))

    def _sealed(self) -> Sealed:
        state = self.state
        body = self._text.of(state)
        chain = seal.Chain(self.run_id, state.step, self.attempt, self.losses, self.seal_head)
        mac, key_id = seal.seal(self.deps.keys, chain, body)
        return Sealed(
            state.step,
            body.decode(),
            mac,
            key_id,
            self.seal_head,
            self.losses,
            resume.THIS_RELEASE.state_format,
            resume.THIS_RELEASE.seal_format,
        )

    def _stage(self, entries: list[dict[str, Any]]) -> None:
        """The previous step's finished calls and notes, and these entries, join the unflushed."""
        self.state.unflushed_calls += self.carried_rows
        self.state.unflushed += [*self.carried_notes, *entries]
        self.carried_rows, self.carried_notes = [], []
        if self._unflushed_since is None:
            self._unflushed_since = time.monotonic()

    def _take_unflushed(self) -> Flush:
        """Hand the unflushed over to the statement being built (before the state is sealed)."""
        state = self.state
        taken = Flush(finished=state.unflushed_calls, entries=state.unflushed)
        state.unflushed_calls, state.unflushed = [], []
        self._unflushed_since = None
        return taken

    def _due(self) -> bool:
        since = self._unflushed_since
        return len(self.state.unflushed) >= FLUSH_ENTRIES or (
            since is not None and time.monotonic() - since >= FLUSH_AGE_S
        )

    async def _write_checkpoint(self, entries: list[dict[str, Any]], flush: bool) -> None:
        """I1: the sealed checkpoint in ONE statement before any call of the step is made."""
        state = self.state
        self._stage([*entries, transcript.statement("checkpoint", step=state.step, calls=len(state.calls))])
        # The attempt's first checkpoint flushes, and records when the attempt went on (run_attempts).
        opening = not self._opened
        taken = self._take_unflushed() if flush or opening or self._due() else None
        sealed = self._sealed()
        self.lease.check()  # I3: a process that stalled past its deadline writes nothing more
        await self.handle.write_checkpoint(sealed, taken, opening=opening)
        self._opened = True
        self.seal_head = sealed.seal

    async def _end(
        self,
        status: str,
        answer: str | None = None,
        error: str | None = None,
        extra: list[dict[str, Any]] | None = None,
    ) -> str:
        if self._facts is None:
            await self.gate_facts()  # the run's channel, for the count of runs ended
        entries = list(extra or [])
        answer, error = storable(answer)[0], storable(error)[0]  # I16: a vendor's error text included
        if answer is not None:
            entries.append(transcript.entry("answer", text=answer))
        if error is not None:
            entries.append(transcript.entry("error", reason=error))
        entries.append(transcript.statement("run_" + status, step=self.state.step))
        self._stage(entries)
        taken = self._take_unflushed()
        sealed = self._sealed()
        kept = None if answer is None else self._kept(answer)  # I12: kept by the statement that ends the run
        self.lease.check()
        self.lease.releasing = True  # the statement deletes the lease
        await self.handle.end(sealed, taken, status, kept, error, self.deps.holder)
        self.seal_head = sealed.seal
        self._count_end(status)
        return status

    def _count_end(self, status: str) -> None:
        channel = self._facts.channel if self._facts is not None else "unknown"
        self.deps.metrics.run_ended(self.state.agent or "unknown", channel, status)

    def _kept(self, answer: str) -> SealedAnswer:
        mac, key_id = seal.seal_answer(self.deps.keys, self.run_id, answer)
        return SealedAnswer(answer, mac, key_id, self.deps.settings.answer_ttl_s)

    async def _answer(self, answer: str, extra: list[dict[str, Any]]) -> str:
        """I12: keep the answer, sealed, and write the hand-on ahead (the run is `answered`, its lease
        kept); then hand it on."""
        entries = [
            *extra,
            transcript.entry("answer", text=answer),
            transcript.statement("run_answered", step=self.state.step),
        ]
        self._stage(entries)
        taken = self._take_unflushed()
        sealed = self._sealed()
        kept = self._kept(answer)
        self.lease.check()
        await self.handle.answered(sealed, taken, kept, self.deps.holder)
        self.seal_head = sealed.seal
        self.deps.faults.hit("before_hand_on")
        return await self._hand_on(answer, resumed=False)

    async def _hand_on_kept(self) -> str:
        """I12: a run taken over after its answer was kept hands on that answer, verified by its seal."""
        kept = await self.handle.kept_answer()
        if kept is None:
            return await self._end("failed", error="the kept answer is gone (purged after TICKETIQ_ANSWER_TTL_S); "
                                   "it was not handed on")  # fmt: skip
        try:
            seal.verify_answer(self.deps.keys, self.run_id, kept.answer, kept.seal, kept.key_id)
        except SealInvalid as exc:
            self.lease.releasing = True
            await self.handle.fail(str(exc), "agent.run.checkpoint_rejected", self.deps.holder)
            self._count_end("failed")
            return "failed"
        if kept.answer != self.state.answer:
            self.lease.releasing = True
            await self.handle.fail("the kept answer is not the answer the checkpoint holds",
                                   "agent.run.checkpoint_rejected", self.deps.holder)  # fmt: skip
            self._count_end("failed")
            return "failed"
        if self.deps.hand_ons.get((await self.gate_facts()).channel) is not None:
            # I17: the hand-on may write rows (a Teams reply's call): under a checkpoint this attempt sealed.
            await self._write_checkpoint(
                [transcript.statement("checkpoint", step=self.state.step, resealed=True)], flush=True
            )
        return await self._hand_on(kept.answer, resumed=True)

    async def _hand_on(self, answer: str, resumed: bool) -> str:
        """Hand the kept answer on, once, under this attempt: the entry point's own step (none yet for
        A2A and co-pilot: their task and caller follow the run's status), then the run succeeds."""
        facts = await self.gate_facts()
        action = self.deps.hand_ons.get(facts.channel)
        detail: dict[str, Any] = {"channel": facts.channel, "resumed": resumed}
        if action is not None:
            detail.update(await action(self, answer))
        self.lease.check()
        self.lease.releasing = True  # the statement deletes the lease
        entries = [transcript.entry("handed_on", channel=facts.channel, resumed=resumed),
                   transcript.statement("run_succeeded", step=self.state.step)]  # fmt: skip
        await self.handle.hand_on(answer, entries, self.deps.holder, detail)
        self._count_end("succeeded")
        return "succeeded"

    async def _suspend(self, work: StepWork) -> bool:
        """Wait for a person (a decision, or an input to a question the model asked): what the step
        produced is recorded; the calls stay on the checkpoint. False when every request was decided
        meanwhile (I15): the run goes on."""
        self.carried_rows += work.finished
        self.carried_notes += work.entries
        self._stage([transcript.statement("checkpoint", step=self.state.step, calls=len(self.state.calls))])
        taken = self._take_unflushed()
        sealed = self._sealed()
        self.lease.check()
        reasons = [f"the model asks for input: {ask['question']}" for ask in work.asks]
        reasons += work.held  # I24: a restored run's writes held for an operator, each with why
        reasons += ["a call awaits approval"] if work.approvals_held > len(work.held) else []
        waiting = [transcript.entry("waiting", reason=r) for r in reasons] + [transcript.statement("run_waiting")]
        self.lease.releasing = True  # a suspend deletes the lease
        suspended = await self.handle.suspend(sealed, taken, waiting, self.deps.holder, work.asks)
        self.lease.releasing = suspended  # not suspended: the run goes on, its lease renewed again
        self.seal_head = sealed.seal
        return suspended

    async def _fail_for_good(self, exc: StorageError) -> str:
        """A statement the database refuses for a reason no retry can fix: the run fails with the reason
        instead of being lost and claimed again and again (I16)."""
        log.error("run %s attempt %s: a statement was refused for good: %s", self.run_id, self.attempt, exc)
        reason = f"the database refused a statement of this run for good: {exc}"
        self.lease.releasing = True
        try:
            await self.handle.fail(reason[:2000], "agent.run.failed", self.deps.holder)
        except (Fenced, StorageError) as again:
            log.error("run %s attempt %s: could not fail the run: %s", self.run_id, self.attempt, again)
            return "lost"
        self._count_end("failed")
        return "failed"

    async def _audit_resumed(self, left: list[resume.LeftCall], work: StepWork, handing_on: bool = False) -> None:
        """I8: every resume is audited with the step, the losses and, per call left, its index, tool,
        class, the route planned and what happened."""
        self.deps.metrics.resumed()
        calls = []
        for item in left:
            happened = work.happened.get(item.call.idx, Happened.MADE)
            self.deps.metrics.settled(happened.value)
            calls.append({
                "idx": item.call.idx, "tool": item.call.tool, "class": item.call.tool_class.value,
                "route": item.route.value, "happened": happened.value,
            })  # fmt: skip
        await self.handle.audit("agent.run.crash_resumed", self.deps.holder, {
            "step": self.state.step, "losses": self.losses, "attempt": self.attempt, "calls": calls,
            "handing_on": handing_on,
        })  # fmt: skip
        if self.trace is not None:
            await self._trace_takeover(left, work, handing_on)

    async def _trace_takeover(self, left: list[resume.LeftCall], work: StepWork, handing_on: bool) -> None:
        """The spans the lost attempt's process held when it died, written from the record (runtime/lost_spans.py):
        it never sent them. Then the takeover, under this attempt."""
        assert self.trace is not None
        rows = await TimelineStore(self.deps.db).read(self.run_id)
        in_flight = [(i.call, "in_flight" if i.row is None else i.row.status,
                      work.happened.get(i.call.idx, Happened.MADE).value)
                     for i in left if i.row is None or i.row.status not in ("done", "settled")]  # fmt: skip
        agent = self.deps.catalog.get(self.state.agent)
        times = {(int(p["step"]), int(p["idx"])): (p.get("sent_at"), p.get("outcome_at")) for p in rows.pending_calls}
        times.update({(c.step, c.idx): (c.marked_at or c.sent_at, c.outcome_at) for c in rows.calls})
        record = lost_spans.Record(rows.attempts, [n.entry for n in rows.notes],
                                  {(c.step, c.idx): c.marked_at for c in rows.calls}, times)  # fmt: skip
        lost_spans.write_takeover(self.trace, record, self.state.agent, (agent.model if agent else None)
                                 or self.deps.settings.model, self.state.traceparent, self.state.step, in_flight,
                                 handing_on)  # fmt: skip
