"""What the API asks about workflow runs: start one (a job of kind `workflow`), read one with the steps
it executed. Refusals are RequestErrors naming the field; nothing is written for a refused start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ticketiq.agents.workflows import Workflow
from ticketiq.auth import tokens
from ticketiq.auth.tokens import Principal
from ticketiq.errors import Forbidden, NotFound, RequestError
from ticketiq.jobs.workflow import KIND
from ticketiq.jobs.workflow_plan import WorkflowState, input_problem
from ticketiq.storage.job_store import JobRow, JobStore
from ticketiq.storage.workflow_store import StepRow, WorkflowStore

if TYPE_CHECKING:
    from ticketiq.engine.engine import Engine
    from ticketiq.jobs.queue import JobQueue


@dataclass(frozen=True)
class WorkflowRunShown:
    job: JobRow
    flow: Workflow
    steps: list[StepRow]

    def shown(self) -> dict[str, Any]:
        state = WorkflowState.from_json(self.job.state, self.flow)  # a queued run: at its first step
        return {
            "id": self.job.id,
            "workflow": self.job.params.get("workflow"),
            "status": self.job.status,
            "input": self.job.params.get("input"),
            "steps_executed": state.executed,
            "next_step": state.at if self.job.status in ("queued", "running") else None,
            "error": self.job.error,
            "attempts": self.job.attempt,
            "losses": self.job.losses,
            "created_by": self.job.created_by,
            "created_at": self.job.created_at,
            "finished_at": self.job.finished_at,
            "steps": [_step(s) for s in self.steps],
        }


def _step(s: StepRow) -> dict[str, Any]:
    return {
        "seq": s.seq, "step": s.step_id, "kind": s.kind, "tool": s.tool, "agent": s.agent, "key": s.key,
        "status": s.status, "args": s.args, "output": s.output, "error": s.error, "run_id": s.run_id,
        "settled": s.settled, "started_at": s.started_at, "ended_at": s.ended_at,
    }  # fmt: skip


def declared(engine: Engine, name: str) -> Workflow:
    flow = engine.deps.catalog.workflows.get(name)
    if flow is None:
        known = ", ".join(sorted(engine.deps.catalog.workflows)) or "none"
        raise NotFound("path.name", f"no workflow named {name!r}; declared: {known}")
    return flow


async def start(
    engine: Engine, queue: JobQueue, name: str, given: Any, caller: Principal, key: str | None = None
) -> JobRow:
    """A queued run of the workflow, made by the caller's token. 404 `path.name` for no such workflow;
    403 when the token may not start an agent it runs; 422 `body.input[.<field>]` for an input that
    cannot start it."""
    flow = declared(engine, name)
    for agent in flow.agents:
        refused = tokens.start_refusal(caller, agent)
        if refused is not None:
            raise Forbidden("path.name", f"workflow {name} runs agent {agent}: {refused}")
    problem = input_problem(flow, given, engine.deps.registry.tools)
    if problem is not None:
        raise RequestError(f"body.input.{problem.field}" if problem.field else "body.input", problem.message)
    return await queue.submit(KIND.name, {"workflow": name, "input": given}, caller.name, internal=True, key=key)


async def read(engine: Engine, name: str, job_id: str, reader: Principal) -> WorkflowRunShown:
    """The run with its steps; 404 `path.run_id` for no run of this workflow, or another token's run
    when the reader sees only its own."""
    flow = declared(engine, name)
    job = await JobStore(engine.deps.db).get(job_id)
    scope = tokens.run_scope(reader)
    if job is None or job.kind != KIND.name or job.params.get("workflow") != name or (
        scope is not None and job.created_by != scope
    ):  # fmt: skip
        raise NotFound("path.run_id", f"no run {job_id} of workflow {name}")
    return WorkflowRunShown(job, flow, await WorkflowStore(engine.deps.db).steps(job_id))
