"""The `workflow` job kind: one run of a workflow the agents file declares (`agents/workflows.py`),
made by `POST /v1/workflows/{name}/runs` and run by any process's job worker.

Its state is its checkpoint (`jobs/workflow_plan.py`), written with the step's row in ONE statement
fenced by the job's attempt (I3) after every step, so a run whose process died goes on, on another
process, from the step after the last one written. Each step sends its step key (I11): a step executed
again after a crash sends the same key, a loop back to it a new one.

- A read is made (again, after a crash).
- A write is marked in doubt (I2) in the same kind of statement, the state saying which, before it is
  sent within its window (I14). One left in doubt by a lost attempt, or answered so that its outcome is
  open, is settled as I9 says, through the gates as they stand now: a keyed write its vendor dedupes
  for longer than a resume is sent again with the same key; a write with a reader is read back once it
  can no longer be in flight (the mark plus its budget, on the database clock) and sent once if it is
  not there; any other fails the run: "outcome unknown, not sent again".
- An agent step makes a run with the step key as its idempotency key, so a step executed again finds
  the run it made (which survives crashes as any run does) and waits for its end; its answer is the
  step's output.
- A tool step runs as the workflow's owner, through every gate (containment, Stop of the channel,
  run-as grants); a tool that needs approval is refused: a workflow never waits for a person.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.agents.workflows import Workflow, WorkflowStep
from ticketiq.engine import in_doubt, run_keys
from ticketiq.engine.delegation import take_over_if_lapsed
from ticketiq.engine.gates import Verdict, call_gate
from ticketiq.engine.in_doubt import Settled, Unknown
from ticketiq.engine.run_keys import Expected
from ticketiq.engine.settlement import CallRow, Happened, Route, ToolNow, route
from ticketiq.engine.transcript import scrub
from ticketiq.jobs.kinds import Job, JobCancelled, JobFailed, JobKind, params_error
from ticketiq.jobs.workflow_plan import WorkflowState, following, input_problem, over_bound, step_key
from ticketiq.runtime.faults import Faults
from ticketiq.storage.workflow_store import CHANNEL, StepWrite
from ticketiq.tools.base import CallContext, Outcome, ReadBack, SendWindow, Tool, ToolClass
from ticketiq.tools.schema import validate
from ticketiq.values.storable import storable
from ticketiq.values.workflow_values import MissingValue, as_text, render

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine
    from ticketiq.storage.job_store import StepWritten

TERMINAL_RUN = frozenset({"succeeded", "failed", "interrupted", "stopped"})  # engine.TERMINAL
# While an agent step's run goes on, the job looks this often whether a person cancelled it.
RUN_LOOK_S = 2.0
UNKNOWN = "outcome unknown, not sent again"


def check(params: Mapping[str, Any], engine: Engine) -> dict[str, Any]:
    """A declared workflow and an input that can start it (422 `body.params.<field>`)."""
    name = params.get("workflow")
    declared = engine.deps.catalog.workflows
    if not isinstance(name, str) or name not in declared:
        raise params_error("workflow", f"no workflow named {name!r}; declared: {', '.join(sorted(declared)) or 'none'}")
    given = params.get("input", {})
    problem = input_problem(declared[name], given, engine.deps.registry.tools)
    if problem is not None:
        raise params_error(f"input.{problem.field}" if problem.field else "input", problem.message)
    return {"workflow": name, "input": given}


async def run(job: Job) -> dict[str, Any]:
    flow = job.engine.deps.catalog.workflows.get(str(job.params.get("workflow")))
    if flow is None:
        raise JobFailed(f"workflow {job.params.get('workflow')!r} is no longer declared in the agents file")
    return await WorkflowRun(job, flow).go()


@dataclass(frozen=True)
class StepDone:
    """What a step came to: its output, and what the step row keeps beside it."""

    output: Any
    settled: str | None = None  # how a write in doubt was settled (I9)
    args: dict[str, Any] | None = None  # a tool step's arguments as sent
    run_id: str | None = None  # an agent step's run


KIND = JobKind(
    name="workflow",
    resumable=True,
    description="A run of a workflow the agents file declares: its steps, checkpointed after each (issue 10).",
    check=check,
    run=run,
    unit="steps",
    internal=True,
)


class WorkflowRun:
    def __init__(self, job: Job, flow: Workflow) -> None:
        self.job = job
        self.flow = flow
        self.deps = job.engine.deps
        self.given: dict[str, Any] = dict(job.params.get("input") or {})
        self.state = WorkflowState.from_json(job.state, flow)
        self.store = job.workflows

    async def go(self) -> dict[str, Any]:
        if self.state.in_doubt is not None:
            await self._settle_left()
        while self.state.at is not None:
            bound = over_bound(self.flow, self.state)
            if bound is not None:
                raise JobFailed(f"workflow {self.flow.name}: {bound}")
            step = self._step(self.state.at)
            key = step_key(self.job.id, self.state)
            done = await (self._tool_step(step, key) if step.tool is not None else self._agent_step(step, key))
            await self._advance(step, key, done)
        return {"workflow": self.flow.name, "steps_executed": self.state.executed, "history": self.state.history,
                "outputs": self.state.outputs}  # fmt: skip

    def _step(self, step_id: str) -> WorkflowStep:
        try:
            return self.flow.step(step_id)
        except StopIteration:
            raise JobFailed(f"workflow {self.flow.name}: step {step_id!r} is no longer declared") from None

    # ----- statements (each ONE, fenced by the job's attempt, I3) ----------------------------------

    async def _advance(self, step: WorkflowStep, key: str, done: StepDone) -> None:
        """The step is done: count it, decide the next, and write both with the step's row."""
        seq = self.state.seq
        self.state.executed_step(step.id, key, done.output)
        self.state.at = following(self.flow, step, self.state.scope(self.given))
        await self._ended(StepWrite(
            seq, step.id, step.kind, key, "done", tool=step.tool, agent=step.agent, args=done.args,
            output=done.output, run_id=done.run_id, settled=done.settled,
        ), done=self.state.executed)  # fmt: skip

    async def _fail(self, step: WorkflowStep, key: str, error: str, *, args: Any = None, settled: str | None = None,
                    run_id: str | None = None) -> JobFailed:  # fmt: skip
        """The step failed: its row says why (the state keeps the step, nothing left in doubt); the run
        fails with the reason."""
        self.state.in_doubt = None
        what = f"step {step.id!r} ({step.tool or 'agent ' + str(step.agent)})"
        await self._ended(StepWrite(
            self.state.seq, step.id, step.kind, key, "failed", tool=step.tool, agent=step.agent, args=args,
            error=error, run_id=run_id, settled=settled,
        ), done=self.state.executed)  # fmt: skip
        return JobFailed(f"workflow {self.flow.name}: {what} failed: {error}")

    async def _begun(self, step: StepWrite) -> None:
        self._written(step, await self.job.step_begun(step, self.state.to_json()))

    async def _ended(self, step: StepWrite, done: int) -> None:
        self._written(step, await self.job.step_ended(step, self.state.to_json(), done))

    def _written(self, step: StepWrite, written: StepWritten) -> None:
        if written.written != 1:
            raise JobFailed(f"step {step.step_id} #{step.seq}: its row holds another key than {step.key}")
        if written.cancel_requested_by is not None:
            raise JobCancelled(f"cancelled by {written.cancel_requested_by} at step {step.step_id!r} (#{step.seq})")

    # ----- tool steps -------------------------------------------------------------------------------

    async def _tool_step(self, step: WorkflowStep, key: str) -> StepDone:
        assert step.tool is not None
        tool = self.deps.registry.get(step.tool)
        if tool is None:
            raise await self._fail(step, key, f"tool {step.tool} is no longer registered")
        args: dict[str, Any] = self._render(step, step.args)  # a mapping renders to a dict
        problem = validate(tool.parameters, args)
        if problem is not None:
            raise await self._fail(step, key, f"arguments rejected: {problem}", args=args)
        await self._gate(step, tool, key, args)
        if not tool.tool_class.changes:
            outcome = await tool.executor(self._context(tool, args, key))
            if not outcome.ok:
                raise await self._fail(step, key, outcome.error or "failed", args=args)
            return StepDone(self._clean(outcome.result), args=args)
        return await self._send(step, tool, args, key)

    async def _send(self, step: WorkflowStep, tool: Tool, args: dict[str, Any], key: str) -> StepDone:
        """A write: the in-doubt protocol's send (engine/in_doubt.py); one answered so that its outcome is
        open is settled at once."""
        return await in_doubt.send(ToolStepWrite(self, step, tool, args, key, tool.tool_class))

    async def _settle_left(self) -> None:
        """The write a lost attempt left in doubt: settled (I9) before anything else, under its own key."""
        left = self.state.in_doubt
        assert left is not None
        step, key = self._step(str(left["step"])), str(left["key"])
        tool = self.deps.registry.get(str(left["tool"]))
        if tool is None:
            raise await self._fail(step, key, f"{UNKNOWN} (tool {left['tool']} is no longer registered)",
                                   args=left.get("args"), settled=Happened.UNKNOWN_NOT_SENT)  # fmt: skip
        write = ToolStepWrite(self, step, tool, dict(left.get("args") or {}), key, ToolClass(left["class"]))
        await self._advance(step, key, (await in_doubt.settle(write, write.route())).done)

    async def _gate(self, step: WorkflowStep, tool: Tool, key: str, args: Any) -> None:
        """Every gate, the workflow's owner as the run-as principal; a refusal fails the step."""
        facts = await self.store.gate_facts(self.flow.name, self.flow.owner, self.flow.tenant)
        decision = call_gate(facts, tool.name, frozenset(self.flow.tools))
        if decision.verdict is Verdict.ALLOW:
            return
        reason = decision.reason
        if decision.gate == "approval":
            reason = f"tool {tool.name} needs a person's approval, and a workflow step never waits for one"
        raise await self._fail(step, key, f"refused by the {decision.gate} gate: {reason}", args=args)

    def _context(self, tool: Tool, args: dict[str, Any], key: str, window: SendWindow | None = None) -> CallContext:
        return CallContext(run_id=self.job.id, tool=tool.name, args=args, key=key, http=self.job.http,
                           settings=self.job.settings, before_send=self.job.check, lost=self.job.lost,
                           window=window)  # fmt: skip

    def _clean(self, value: Any) -> Any:
        """A vendor's answer fit for Postgres and for the API: secrets it echoed masked, text Postgres
        cannot store replaced (I16)."""
        return storable(scrub(value, self.deps.settings.secrets()))[0]

    def _render(self, step: WorkflowStep, template: Any) -> Any:
        try:
            return render(template, self.state.scope(self.given))
        except MissingValue as missing:
            raise JobFailed(
                f"workflow {self.flow.name}: step {step.id!r}: {{{{ {missing.path} }}}} has no value "
                "(a key or index that is not there, or a step that has not run yet)"
            ) from None

    # ----- agent steps ------------------------------------------------------------------------------

    async def _agent_step(self, step: WorkflowStep, key: str) -> StepDone:
        engine = self.job.engine
        agent = self.deps.catalog.get(str(step.agent))
        if agent is None:
            raise await self._fail(step, key, f"agent {step.agent} is no longer defined")
        text = as_text(self._render(step, step.input))
        self.job.check()
        # The run's key is the step key's (run_keys): a step executed again finds the run it made, and
        # only that run (I19).
        maker = f"workflow:{self.job.id}"
        made = await engine.create_run(agent, text, may_wait=False, channel=CHANNEL,
                                       idempotency_key=run_keys.workflow_step(key), actor=maker,
                                       created_by=self.job.created_by)  # fmt: skip
        if not made.created and (foreign := run_keys.foreign(made, Expected(CHANNEL, maker, self.job.created_by))):
            raise await self._fail(step, key, foreign)
        await self._begun(StepWrite(self.state.seq, step.id, "agent", key, "running", agent=agent.name,
                                    run_id=made.id))  # fmt: skip
        if made.status == "queued":
            await engine.start(made.id)  # False: another process has it already
        elif made.status == "running":
            await take_over_if_lapsed(engine, made.id)  # a live run is waited for; a lapsed one taken here
        ended = await self._wait_run(made.id)
        if ended.status != "succeeded":
            raise await self._fail(step, key, f"agent run {made.id} ended {ended.status}: {ended.error or 'no reason'}",
                                   run_id=made.id)  # fmt: skip
        return StepDone(ended.answer, run_id=made.id)

    async def _wait_run(self, run_id: str) -> Any:
        engine = self.job.engine
        while True:
            status = await engine.wait_terminal(run_id, timeout_s=RUN_LOOK_S)
            if status is None:
                raise JobFailed(f"workflow {self.flow.name}: agent run {run_id} is gone")
            if status.status in TERMINAL_RUN:
                return status
            self.job.check()
            try:
                await self.job.progress(self.state.executed)
            except JobCancelled:
                with contextlib.suppress(Exception):  # the cancel stands whether or not the Stop lands
                    await engine.request_stop(run_id, f"workflow:{self.job.id}")
                raise


@dataclass
class ToolStepWrite:
    """A workflow's tool step that writes, as the in-doubt protocol's write (engine/in_doubt.py): marked
    in the job's state and the step's row by `Job.step_begun`, fenced by the job's attempt (I3), its
    I14 deadline the mark plus its budget on the database clock; its outcome is the step's `StepDone`,
    written with the next step. `marked`: the class it was marked with (I10)."""

    run: WorkflowRun
    step: WorkflowStep
    tool: Tool
    args: dict[str, Any]
    key: str
    marked: ToolClass

    @property
    def budget_s(self) -> float:
        return self.run.deps.settings.write_budget_s

    @property
    def faults(self) -> Faults:
        return self.run.deps.faults

    @property
    def lost(self) -> asyncio.Event:
        return self.run.job.lost

    def check(self) -> None:
        self.run.job.check()

    def lease_deadline(self) -> float:
        # The lease deadline is checked at the last moment before each try's bytes (job.check): a window
        # bounded by the budget alone is enough for the mark's horizon.
        return math.inf

    def route(self) -> Route:
        """What settlement.route says of it in doubt; only a keyed or an idempotent resend or a read-back
        (no delegation or remote agent is a workflow's step), any other is unknown."""
        tool = self.tool
        now = ToolNow(exists=True, has_reader=tool.reader is not None, dedupe_window_s=tool.dedupe_window_s)
        taken = route(CallRow("in_doubt", self.marked, self.key), now)
        return taken if taken in (Route.RESEND_SAME_KEY, Route.RESEND_SAME_ARGS, Route.READ_BACK) else Route.UNKNOWN

    async def mark(self) -> None:
        run, tool = self.run, self.tool
        run.state.in_doubt = {"seq": run.state.seq, "step": self.step.id, "key": self.key, "tool": tool.name,
                              "class": tool.tool_class.value, "args": self.args}  # fmt: skip
        await run._begun(StepWrite(run.state.seq, self.step.id, "tool", self.key, "in_doubt", tool=tool.name,
                                   args=self.args, budget_s=self.budget_s))  # fmt: skip

    async def send(self, window: SendWindow) -> Outcome:
        return await self.tool.executor(self.run._context(self.tool, self.args, self.key, window))

    def reopens(self, answer: Outcome, how: str | None) -> Route | None:
        # An open answer to a first send is settled now, as a lost attempt's would be (I9); one to a
        # settlement's send fails the run.
        return self.route() if answer.uncertain and how is None else None

    async def record(self, answer: Outcome, how: str | None) -> StepDone:
        run, step, key, args = self.run, self.step, self.key, self.args
        if answer.uncertain:
            raise await run._fail(
                step, key, f"{UNKNOWN} ({answer.error})", args=args, settled=Happened.UNKNOWN_NOT_SENT
            )
        if not answer.ok:
            raise await run._fail(step, key, answer.error or "failed", args=args, settled=how)
        return StepDone(run._clean(answer.result), how, args)

    async def in_flight_s(self) -> float:
        return await self.run.job.in_flight_s(self.run.state.seq, self.key)

    async def read_back(self) -> ReadBack:
        assert self.tool.reader is not None
        return await self.tool.reader(self.run._context(self.tool, self.args, self.key))

    async def found(self, read: ReadBack) -> StepDone:
        landed = read.outcome.result if read.outcome is not None and read.outcome.ok else {"landed": True}
        return StepDone(self.run._clean(landed), Happened.FOUND, self.args)

    async def unknown(self, why: Unknown) -> StepDone:
        said = f"{self.tool.name} ({self.marked.value}) {why.value}" if why is Unknown.NO_WAY else why.value
        raise await self.run._fail(self.step, self.key, f"{UNKNOWN} ({said})", args=self.args,
                                   settled=Happened.UNKNOWN_NOT_SENT)  # fmt: skip

    async def gate(self) -> Settled[StepDone] | None:
        await self.run._gate(self.step, self.tool, self.key, self.args)  # I6: the gates as they stand now
        return None
