"""One run under one attempt: the loop of model steps and calls, every statement fenced.

The loop: ask the model; if it answers with calls, write the sealed checkpoint (I1, one statement),
then make the calls, bounded and concurrent, each changing call marked in doubt first (I2). Every
statement is conditioned on the attempt and a statement matching nothing stops the run at once (I3);
no write is sent once the local lease deadline has passed (I3).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson

from ticketiq.engine import notes, seal
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.gates import GateDecision, GateFacts, Verdict, call_gate, run_gate
from ticketiq.engine.leases import HeldLease
from ticketiq.engine.state import PlannedCall, RunState
from ticketiq.engine.step_keys import approval_key, fresh_key, run_call_key
from ticketiq.errors import Fenced, LeaseLost, ModelError, SealInvalid
from ticketiq.tools.base import CallContext, Tool, ToolClass
from ticketiq.tools.schema import validate

log = logging.getLogger(__name__)

UNCERTAIN = "unknown: the vendor's answer leaves it open whether the write took effect; not sent again"
# Transcript entries and the rows of finished reads wait in the sealed checkpoint (durable, so a
# resume flushes them) and are written to their tables by the next statement that flushes: a step with
# a changing call, the end of the run, or once this many entries or this much time have gathered. A
# fast read-only step so costs one plain UPDATE of its checkpoint row.
FLUSH_ENTRIES = 16
FLUSH_AGE_S = 1.0

Todo = tuple[PlannedCall, GateDecision, str | None]  # a call, its gate decision, a key it must carry


@dataclass
class StepWork:
    """What one step's calls produced, gathered for the next statement."""

    results: dict[int, Any] = field(default_factory=dict)  # idx -> what goes back to the model
    finished: list[dict[str, Any]] = field(default_factory=list)  # reads and refusals: rows to land
    entries: list[dict[str, Any]] = field(default_factory=list)
    waiting: bool = False

    def merge(self, other: StepWork) -> None:
        self.results.update(other.results)
        self.finished += other.finished
        self.entries += other.entries
        self.waiting = self.waiting or other.waiting


class RunDriver:
    def __init__(
        self, deps: EngineDeps, run_id: str, attempt: int, lease: HeldLease, checkpoint: dict[str, Any],
        claimed_at: float | None = None,
    ):  # fmt: skip
        self.deps = deps
        self.claimed_at = claimed_at  # set when this attempt took the run over from a lost one
        self.losses = int(checkpoint.get("losses", 0))
        self.run_id = run_id
        self.attempt = attempt
        self.lease = lease
        self.checkpoint = checkpoint
        self.state: RunState | None = None
        # Finished reads and refusals and their notes ride on the next statement the run writes anyway.
        self.carry = StepWork()
        self.settled: list[dict[str, Any]] = []  # how each call a resumed step left was routed (I8)
        self._unflushed_since: float | None = None
        self._facts: GateFacts | None = None
        self._facts_generation: int | None = None

    # ----- the loop -------------------------------------------------------------------------------

    async def drive(self) -> str:
        """Run to an end; return the status it ended in ('lost' when fenced off)."""
        try:
            return await self._drive()
        except (Fenced, LeaseLost) as exc:
            # I3: taken over (or our lease lapsed): stop now, make no call, write nothing more.
            log.warning("run %s attempt %s stops: %s", self.run_id, self.attempt, exc)
            return "lost"

    async def _drive(self) -> str:
        try:
            self.state = self._verified_state()
        except SealInvalid as exc:
            await self._fail_unstarted(str(exc), "agent.run.checkpoint_rejected")
            return "failed"
        state = self.state
        limit = self.deps.settings.max_losses
        if self.claimed_at is not None and self.losses > limit:
            # I7: lost more often than the limit: failed with the reason, and the transcript is told.
            self.deps.metrics.runs_lost += 1
            return await self._end("failed", error=f"the run was lost {self.losses} times, more than the "
                                   f"limit of {limit}; it is not resumed again")  # fmt: skip
        agent = self.deps.catalog.get(state.agent)
        if agent is None:
            return await self._end("failed", error=f"agent {state.agent} is no longer defined")
        # I6: containment, Stop, channel and run-as (the owner may still run it) pass again.
        blocked = run_gate(await self.gate_facts(fresh=True))
        if not blocked.allowed:
            return await self._end("failed", error=f"refused by the {blocked.gate} gate: {blocked.reason}")
        if self.claimed_at is not None:
            self.deps.metrics.recovery.observe(time.monotonic() - self.claimed_at)
        if state.unflushed or state.unflushed_calls:
            # What the lost attempt wrote ahead goes to the transcript before anything of this one.
            taken = self._take_unflushed()  # taken before sealing: the state no longer holds them
            params = {**self._sealed(), **taken}
            self.lease.check()
            if await self.deps.db.execute("runs.write_checkpoint", params) != 1:
                raise Fenced(self.run_id, self.attempt, "flushing what the last attempt wrote ahead")
        if state.calls:
            from ticketiq.engine.resume import route_left_calls

            work = await route_left_calls(self, await self.gate_facts(fresh=True))
            if self.claimed_at is not None:
                await self._audit_resumed()
            if work.waiting:
                return await self._suspend(work)
            self._absorb(work)
        elif self.claimed_at is not None:
            await self._audit_resumed()
        tools = self.deps.registry.specs(list(agent.tools))
        model = agent.model or self.deps.settings.model
        while True:
            self.lease.check()
            try:
                reply = await self.deps.model.complete(model=model, messages=state.messages, tools=tools)
            except ModelError as exc:
                return await self._end("failed", error=f"model step {state.step + 1} failed: {exc}")
            state.prompt_tokens += reply.prompt_tokens
            state.completion_tokens += reply.completion_tokens
            state.messages.append(reply.message)
            if not reply.tool_calls:
                state.answer = reply.text or ""
                state.calls = []
                self.deps.faults.hit("before_answer")
                return await self._end("succeeded", answer=state.answer)
            state.step += 1
            state.calls = [
                self._plan(i, tc.id, tc.name, tc.arguments, tc.arguments_error) for i, tc in enumerate(reply.tool_calls)
            ]
            state.history.append({"step": state.step, "calls": [c.tool for c in state.calls]})
            facts = await self.gate_facts()
            blocked = run_gate(facts)
            if not blocked.allowed:
                return await self._end("failed", error=f"refused by the {blocked.gate} gate: {blocked.reason}")
            decisions = [self.decide(facts, c) for c in state.calls]
            tokens = reply.prompt_tokens + reply.completion_tokens
            entries = [notes.model_step(state.step, state.calls, reply.text, tokens)]
            entries += [notes.gate(state.step, c, d) for c, d in zip(state.calls, decisions, strict=True)]
            changing = any(
                c.tool_class.changes and d.verdict is not Verdict.REFUSE
                for c, d in zip(state.calls, decisions, strict=True)
            )
            await self._write_checkpoint(entries, flush=changing)
            self.deps.faults.hit("after_checkpoint")
            work = await self.make_calls([(c, d, None) for c, d in zip(state.calls, decisions, strict=True)])
            if work.waiting:
                return await self._suspend(work)
            self._absorb(work)

    def _absorb(self, work: StepWork) -> None:
        """The step's results go back into the conversation; its finished rows ride on the next statement."""
        assert self.state is not None
        for call in self.state.calls:
            result = work.results.get(call.idx, {"error": "no result"})
            self.state.messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call.id,
                    "content": orjson.dumps(result, default=str).decode(),
                }
            )
        self.carry.merge(StepWork(finished=work.finished, entries=work.entries))

    # ----- planning and gates ------------------------------------------------------------------------

    def _plan(self, idx: int, call_id: str, name: str, args: dict[str, Any], args_error: str | None) -> PlannedCall:
        assert self.state is not None
        tool = self.deps.registry.get(name)
        return PlannedCall(
            idx=idx,
            id=call_id,
            tool=name,
            tool_class=tool.tool_class if tool else ToolClass.READ,
            args=args,
            # I11: from the correlation id, the agent loop, the steps taken and the provider's id.
            step_key=run_call_key(self.state.correlation_id, self.state.agent_loop, self.state.step, call_id),
            args_error=args_error,
        )

    def decide(self, facts: GateFacts, call: PlannedCall, approved: bool = False) -> GateDecision:
        assert self.state is not None
        agent = self.deps.catalog.get(self.state.agent)
        offered = frozenset(agent.tools) if agent else frozenset()
        if self.deps.registry.get(call.tool) is None:
            return GateDecision(Verdict.REFUSE, "tools", f"no tool named {call.tool}")
        return call_gate(facts, call.tool, offered, approved=approved)

    async def gate_facts(self, fresh: bool = False) -> GateFacts:
        """The gates' facts for this run: cached until the gate listener reports a change."""
        generation = self.deps.gate_watch.current()
        cached = self._facts is not None and generation is not None and generation == self._facts_generation
        if cached and not fresh and self._facts is not None:
            return self._facts
        row = await self.deps.db.fetch_one("runs.gate_facts", {"run_id": self.run_id})
        if row is None:
            raise Fenced(self.run_id, self.attempt, "reading gate facts (the run is gone)")
        self._facts = GateFacts(
            agent=row["agent"],
            tenant=row["tenant"],
            owner=row["owner"],
            channel=row["channel"],
            may_wait=row["may_wait"],
            agent_quarantine=row["agent_quarantine"],
            tenant_quarantine=row["tenant_quarantine"],
            stopped_by=row["stopped_by"],
            channel_enabled=row["channel_enabled"],
            owner_may_run=row["owner_may_run"],
            granted=frozenset(row["granted"]),
            needs_approval=frozenset(row["needs_approval"]),
        )
        self._facts_generation = generation
        return self._facts

    # ----- making calls --------------------------------------------------------------------------------

    async def make_calls(self, todo: list[Todo]) -> StepWork:
        work = StepWork()
        if len(todo) == 1:  # the common step: one call, no tasks to schedule
            await self._make_call(work, *todo[0])
            return work
        limit = asyncio.Semaphore(self.deps.settings.call_concurrency)

        async def one(call: PlannedCall, decision: GateDecision, key: str | None) -> None:
            async with limit:
                await self._make_call(work, call, decision, key)

        # A TaskGroup cancels the step's other calls when one finds the run fenced off (I3).
        async with asyncio.TaskGroup() as group:
            for call, decision, key in todo:
                group.create_task(one(call, decision, key))
        return work

    async def _make_call(self, work: StepWork, call: PlannedCall, decision: GateDecision, key: str | None) -> None:
        assert self.state is not None
        if call.args_error:
            return self._finish(work, call, {"error": f"arguments rejected: {call.args_error}"}, "refused")
        if decision.verdict is Verdict.REFUSE:
            return self._finish(work, call, {"refused": decision.reason, "gate": decision.gate}, "refused")
        if decision.verdict is Verdict.APPROVAL:
            decided = await self._file_approval(call)
            if decided is None:
                work.waiting = True
                return None
            status, approval_id, by = decided
            if status == "rejected":
                return self._finish(
                    work, call, {"refused": f"approval rejected by {by}", "gate": "approval"}, "refused"
                )
            key = approval_key(approval_id)  # I11: an approved call's key is the approval's
        tool = self.deps.registry.get(call.tool)
        assert tool is not None
        problem = validate(tool.parameters, call.args)
        if problem:
            return self._finish(work, call, {"error": f"arguments rejected: {problem}"}, "refused")
        if not call.tool_class.changes:
            outcome = await tool.executor(self.context(tool, call, key or call.step_key or fresh_key()))
            result = notes.scrub(outcome.for_model(), self.deps.settings.secrets())
            return self._finish(work, call, result, "read", ok=outcome.ok)
        # A Stop or a quarantine may have landed since the step's gates were read: writes look afresh.
        now = run_gate(await self.gate_facts(fresh=True))
        if not now.allowed:
            work.entries.append(notes.gate(self.state.step, call, now))
            return self._finish(work, call, {"refused": now.reason, "gate": now.gate}, "refused")
        work.results[call.idx] = await self.send_write(call, tool, key or call.step_key or fresh_key())
        return None

    def _finish(self, work: StepWork, call: PlannedCall, result: Any, how: str, ok: bool = False) -> None:
        """A read or a refusal: its row and note land with the next statement, not one of their own."""
        assert self.state is not None
        work.results[call.idx] = result
        work.finished.append(
            {
                "step": self.state.step,
                "idx": call.idx,
                "id": call.id,
                "tool": call.tool,
                "class": call.tool_class.value,
                "step_key": call.step_key,
                "args": call.args,
                "gate": "allow" if how == "read" else "refuse",
                "outcome": {"result": result},
                "how": how,
            }
        )
        work.entries.append(notes.call_result(self.state.step, call, None, ok or how == "read", result, how))

    async def send_write(self, call: PlannedCall, tool: Tool, sent_key: str, how: str = "sent") -> Any:
        """Mark in doubt (I2), send (unless the lease deadline passed, I3), record the outcome (I2)."""
        assert self.state is not None
        step = self.state.step
        self.lease.check()
        mark = notes.statement(
            "in_doubt", step=step, idx=call.idx, tool=call.tool, cls=call.tool_class.value, key=sent_key
        )
        await self._fenced(
            "calls.mark_in_doubt",
            "marking a call in doubt",
            {
                "step": step,
                "idx": call.idx,
                "provider_call_id": call.id,
                "tool": call.tool,
                "class": call.tool_class.value,
                "step_key": call.step_key,
                "sent_key": sent_key,
                "args": call.args,
                "entries": [mark],
            },
        )
        self.deps.faults.hit("after_mark")
        outcome = await tool.executor(self.context(tool, call, sent_key))
        self.deps.faults.hit("after_send")
        result = notes.scrub(outcome.for_model(), self.deps.settings.secrets())
        if outcome.uncertain:
            result = {"error": outcome.error, "outcome": UNCERTAIN}
        await self.record(call, result, "done", how, sent_key, outcome.ok)
        return result

    async def record(self, call: PlannedCall, result: Any, status: str, how: str, key: str | None, ok: bool) -> None:
        assert self.state is not None
        entries = [
            notes.call_result(self.state.step, call, key, ok, result, how),
            notes.statement("outcome", step=self.state.step, idx=call.idx, tool=call.tool),
        ]
        await self._fenced(
            "calls.record_outcome",
            "recording a call's outcome",
            {
                "step": self.state.step,
                "idx": call.idx,
                "status": status,
                "outcome": {"result": result},
                "settlement": how,
                "entries": entries,
            },
        )

    def context(self, tool: Tool, call: PlannedCall, key: str) -> CallContext:
        return CallContext(
            run_id=self.run_id,
            tool=tool.name,
            args=call.args,
            key=key,
            http=self.deps.http,
            settings=self.deps.settings,
            before_send=self.lease.check,
        )

    async def _file_approval(self, call: PlannedCall) -> tuple[str, str, str | None] | None:
        """File (or find) the approval request: None while it waits, else (status, id, decided_by)."""
        assert self.state is not None
        row = await self.deps.db.fetch_one(
            "approvals.file",
            {
                "run_id": self.run_id,
                "attempt": self.attempt,
                "id": str(uuid.uuid4()),
                "step": self.state.step,
                "idx": call.idx,
                "tool": call.tool,
                "args": call.args,
                "step_key": call.step_key,
            },
        )
        if row is None:
            raise Fenced(self.run_id, self.attempt, "filing an approval")
        if row["status"] == "pending":
            return None
        return str(row["status"]), str(row["id"]), row["decided_by"]

    # ----- statements ---------------------------------------------------------------------------------

    def _verified_state(self) -> RunState:
        cp = self.checkpoint
        seal.verify(self.deps.keys, self.run_id, int(cp["step"]), cp["state"], cp["seal"], cp["key_id"])
        return RunState.from_json(json.loads(cp["state"]))

    def _sealed(self) -> dict[str, Any]:
        assert self.state is not None
        body = seal.canonical(self.state.to_json())
        mac, key_id = seal.seal(self.deps.keys, self.run_id, self.state.step, body)
        return {
            "run_id": self.run_id,
            "attempt": self.attempt,
            "step": self.state.step,
            "state": body.decode(),
            "seal": mac,
            "key_id": key_id,
        }

    def _stage(self, entries: list[dict[str, Any]]) -> None:
        """The previous step's finished calls and notes, and these entries, join the unflushed."""
        assert self.state is not None
        carried, self.carry = self.carry, StepWork()
        self.state.unflushed_calls += carried.finished
        self.state.unflushed += [*carried.entries, *entries]
        if self._unflushed_since is None:
            self._unflushed_since = time.monotonic()

    def _take_unflushed(self) -> dict[str, Any]:
        """Hand the unflushed over to the statement being built (before the state is sealed)."""
        assert self.state is not None
        taken = {"finished": self.state.unflushed_calls, "entries": self.state.unflushed}
        self.state.unflushed_calls, self.state.unflushed = [], []
        self._unflushed_since = None
        return taken

    def _due(self) -> bool:
        assert self.state is not None
        since = self._unflushed_since
        return len(self.state.unflushed) >= FLUSH_ENTRIES or (
            since is not None and time.monotonic() - since >= FLUSH_AGE_S
        )

    async def _write_checkpoint(self, entries: list[dict[str, Any]], flush: bool) -> None:
        """I1: the sealed checkpoint in ONE statement before any call of the step is made."""
        assert self.state is not None
        self._stage([*entries, notes.statement("checkpoint", step=self.state.step, calls=len(self.state.calls))])
        if flush or self._due():
            taken = self._take_unflushed()
            query, params = "runs.write_checkpoint", {**self._sealed(), **taken}
        else:
            query, params = "runs.write_checkpoint_only", self._sealed()
        self.lease.check()  # I3: a process that stalled past its deadline writes nothing more
        if await self.deps.db.execute(query, params) != 1:
            raise Fenced(self.run_id, self.attempt, "writing the checkpoint")  # I3

    async def _end(
        self,
        status: str,
        answer: str | None = None,
        error: str | None = None,
        extra: list[dict[str, Any]] | None = None,
    ) -> str:
        assert self.state is not None
        entries = list(extra or [])
        if answer is not None:
            entries.append(notes.entry("answer", text=answer))
        if error is not None:
            entries.append(notes.entry("error", reason=error))
        entries.append(notes.statement("run_" + status, step=self.state.step))
        self._stage(entries)
        taken = self._take_unflushed()
        params = {
            **self._sealed(),
            **taken,
            "status": status,
            "answer": answer,
            "error": error,
            "action": f"agent.run.{status}",
            "actor": self.deps.holder,
            "audit": {"step": self.state.step, "attempt": self.attempt, "error": error},
        }
        self.lease.check()
        if await self.deps.db.execute("runs.end", params) != 1:
            raise Fenced(self.run_id, self.attempt, f"ending the run as {status}")
        return status

    async def _suspend(self, work: StepWork) -> str:
        """Wait for a person: what the step produced is recorded; the calls stay on the checkpoint."""
        self.carry.merge(StepWork(finished=work.finished, entries=work.entries))
        return await self._end("waiting", extra=[notes.entry("waiting", reason="a call awaits approval")])

    async def _fail_unstarted(self, reason: str, action: str) -> None:
        await self.deps.db.execute(
            "runs.fail_unstarted",
            {
                "run_id": self.run_id,
                "error": reason,
                "holder": self.deps.holder,
                "action": action,
                "actor": self.deps.holder,
                "audit": {"reason": reason, "attempt": self.attempt},
            },
        )

    async def _audit_resumed(self) -> None:
        """I8: every resume is audited with the step, the losses, and how each call left was settled."""
        assert self.state is not None
        self.deps.metrics.runs_resumed += 1
        for item in self.settled:
            self.deps.metrics.settled(item["settled"])
        await self.audit("agent.run.crash_resumed", {
            "step": self.state.step, "losses": self.losses, "attempt": self.attempt, "calls": self.settled,
        })  # fmt: skip

    async def audit(self, action: str, detail: dict[str, Any]) -> None:
        await self._fenced("runs.audit", f"auditing {action}", {
            "action": action, "actor": self.deps.holder, "detail": detail,
        })  # fmt: skip

    async def _fenced(self, name: str, what: str, params: dict[str, Any]) -> None:
        self.lease.check()
        matched = await self.deps.db.execute(name, {"run_id": self.run_id, "attempt": self.attempt, **params})
        if matched != 1:
            raise Fenced(self.run_id, self.attempt, what)  # I3: zero rows means stop now
