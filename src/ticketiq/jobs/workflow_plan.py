"""A workflow run's decisions, pure: what it does next, when it must stop, what its step key is, and
whether an input can start it. The job (`jobs/workflow.py`) reads and writes; these decide.

The run's state is its checkpoint (the job's saved state, rewritten after every step):

- `at`: the step to execute next (None once the run ended);
- `executed`: how many steps it executed so far: with the run id and the step id it makes the step's
  key (I11), so a step executed again after a crash (nothing saved since it began) sends the same key,
  and a loop back to it (more steps executed meanwhile) a new one;
- `outputs` and `visits`: each step's latest output and how often it ran, for templates and conditions;
- `in_doubt`: the write of step `at` marked before it was sent and whose outcome is not saved (I2);
- `history`: each executed step's id and key, in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ticketiq.agents.workflows import END, Workflow, WorkflowStep
from ticketiq.engine.step_keys import workflow_step_key
from ticketiq.tools.base import Tool
from ticketiq.tools.schema import validate
from ticketiq.values.workflow_values import MissingValue, Scope, render, template_paths


@dataclass
class WorkflowState:
    at: str | None
    executed: int = 0
    outputs: dict[str, Any] = field(default_factory=dict)
    visits: dict[str, int] = field(default_factory=dict)
    in_doubt: dict[str, Any] | None = None  # {seq, step, key, tool, class, args}
    history: list[dict[str, Any]] = field(default_factory=list)  # [{seq, step, key}]

    @classmethod
    def begin(cls, workflow: Workflow) -> WorkflowState:
        return cls(at=workflow.steps[0].id)

    @classmethod
    def from_json(cls, data: Mapping[str, Any], workflow: Workflow) -> WorkflowState:
        """The saved state, or the first step's for a run that saved nothing yet."""
        if not data:
            return cls.begin(workflow)
        return cls(
            at=data.get("at"), executed=int(data.get("executed", 0)), outputs=dict(data.get("outputs", {})),
            visits=dict(data.get("visits", {})), in_doubt=data.get("in_doubt"), history=list(data.get("history", [])),
        )  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        return {
            "at": self.at, "executed": self.executed, "outputs": self.outputs, "visits": self.visits,
            "in_doubt": self.in_doubt, "history": self.history,
        }  # fmt: skip

    def scope(self, given: Mapping[str, Any]) -> Scope:
        return Scope(input=given, outputs=self.outputs, visits=self.visits, executed=self.executed)

    @property
    def seq(self) -> int:
        """The number of the step about to be executed (1 for the first)."""
        return self.executed + 1

    def executed_step(self, step_id: str, key: str, output: Any) -> None:
        """The step ran to its output: count it. Where the run goes next (`at`) is decided from here,
        with this output and count in scope (`following`)."""
        self.history.append({"seq": self.seq, "step": step_id, "key": key})
        self.executed += 1
        self.outputs[step_id] = output
        self.visits[step_id] = self.visits.get(step_id, 0) + 1
        self.in_doubt = None
        self.at = None


def step_key(run_id: str, state: WorkflowState) -> str:
    """I11: from the run, the step and the steps executed before it."""
    assert state.at is not None
    return workflow_step_key(run_id, state.at, state.executed)


def following(workflow: Workflow, step: WorkflowStep, scope: Scope) -> str | None:
    """The step after `step`: the first branch whose condition holds (one without a condition always
    does), else the next in order; None when the run ends (`goto: end`, or past the last step).
    `scope` holds the step's own output already."""
    for branch in step.next:
        if branch.condition is None or branch.condition.holds(scope):
            return None if branch.goto == END else branch.goto
    return workflow.following(step.id)


def over_bound(workflow: Workflow, state: WorkflowState) -> str | None:
    """Why the run must stop before its next step (it executed `max_steps` already); None when it may go on."""
    if state.at is None or state.executed < workflow.max_steps:
        return None
    last = state.history[-1]["step"] if state.history else "none"
    return (
        f"max_steps reached: the workflow executed {state.executed} steps (its bound, max_steps {workflow.max_steps}) "
        f"without ending; the last was {last!r} and the next would have been {state.at!r}"
    )


# ----- the input ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputProblem:
    field: str  # the input's field, dotted: `issue` (empty: the input as a whole)
    message: str


def input_problem(workflow: Workflow, given: Any, tools: Mapping[str, Tool]) -> InputProblem | None:
    """Whether `given` can start the workflow: an object holding every field its templates read, and
    each tool argument made from the input alone fitting the tool's schema. None when it can."""
    if not isinstance(given, dict):
        return InputProblem("", "the input must be a JSON object")
    for name in workflow.input_fields():
        if name not in given:
            return InputProblem(name, f"workflow {workflow.name} reads input.{name}: it is required")
    scope = Scope(input=given)
    for step in workflow.steps:
        tool = tools.get(step.tool) if step.tool else None
        if tool is None:
            continue
        properties = tool.parameters.get("properties", {})
        for arg, template in step.args.items():
            paths = list(template_paths(template))
            if not paths or any(p[0] != "input" for p in paths) or arg not in properties:
                continue  # read from earlier steps, or a literal: checked when the step runs
            try:
                value = render(template, scope)
            except MissingValue as missing:
                return InputProblem(_field(missing.path), f"{missing.path} has no value (step {step.id} reads it)")
            problem = validate({"type": "object", "properties": {arg: properties[arg]}}, {arg: value})
            if problem is not None:
                named = ".".join(paths[0][1:])
                return InputProblem(named, f"step {step.id} passes it to {step.tool}: {problem}")
    return None


def _field(path: str) -> str:
    return path.removeprefix("input").removeprefix(".")
