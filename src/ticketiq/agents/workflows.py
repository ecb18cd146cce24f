"""Workflows, declared in the agents file (`workflows:`), checked once at load.

```yaml
workflows:
  follow-up:
    description: Read a Jira issue, have the reader summarise it, comment, chase it while it is open.
    owner: ops-bot            # run-as principal of the tool steps: its grants decide what they may call
    tenant: acme
    max_steps: 12             # bound on steps executed (a loop back counts each pass); default 20
    steps:
      - id: read
        tool: jira_get_issue
        args: {issue_key: "{{ input.issue }}"}
      - id: summarise
        agent: reader          # an agent run; its answer is the step's output
        input: "Summarise {{ input.issue }}: {{ steps.read.output.fields.summary }}"
      - id: comment
        tool: jira_add_comment
        args: {issue_key: "{{ input.issue }}", body: "{{ steps.summarise.output }}"}
      - id: check
        tool: jira_get_issue
        args: {issue_key: "{{ input.issue }}"}
        next:                  # the first branch whose `if` holds; one without `if` is the default
          - if: steps.check.output.fields.status.name != "Done" and steps.comment.visits < 2
            goto: comment      # a loop back: a new step key (I11)
          - goto: end          # `end` ends the run; with no branch taken, the next step in order
```

Templates and conditions are `values/workflow_values.py`. Everything a file can get wrong is a
ConfigError at start naming the workflow and the step: an unknown tool or agent, a `goto` to no step,
a template path that can name no value, a condition that does not parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ticketiq.errors import ConfigError
from ticketiq.values.mcp_servers import SEPARATOR, from_agents_file
from ticketiq.values.workflow_values import (
    Condition,
    ExpressionError,
    parse_condition,
    path_problem,
    template_paths,
)

END = "end"  # `goto: end` ends the run
DEFAULT_MAX_STEPS = 20
MAX_STEPS_LIMIT = 10_000
_WORKFLOW_FIELDS = {"description", "owner", "tenant", "max_steps", "steps"}
_STEP_FIELDS = {"id", "tool", "args", "agent", "input", "next"}
_STEP_ID = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
# A tool step runs outside any agent run: a delegation needs a parent run (use an agent step instead).
_NOT_A_STEP = {"delegate_to_agent": "a delegation needs a parent run; use an agent step (`agent:`) instead"}


@dataclass(frozen=True)
class Branch:
    goto: str  # a step id or END
    condition: Condition | None = None  # None: the default branch

    def shown(self) -> dict[str, str]:
        return {"goto": self.goto} if self.condition is None else {"if": self.condition.text, "goto": self.goto}


@dataclass(frozen=True)
class WorkflowStep:
    id: str
    tool: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)  # templates, rendered at the step
    agent: str | None = None
    input: str = ""  # for an agent step: a template of what the agent is asked
    next: tuple[Branch, ...] = ()

    @property
    def kind(self) -> str:
        return "tool" if self.tool is not None else "agent"

    def shown(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id}
        out.update({"tool": self.tool, "args": dict(self.args)} if self.tool else {"agent": self.agent,
                                                                                  "input": self.input})  # fmt: skip
        if self.next:
            out["next"] = [b.shown() for b in self.next]
        return out


@dataclass(frozen=True)
class Workflow:
    name: str
    owner: str
    steps: tuple[WorkflowStep, ...]
    tenant: str = "default"
    description: str = ""
    max_steps: int = DEFAULT_MAX_STEPS

    def step(self, step_id: str) -> WorkflowStep:
        return next(s for s in self.steps if s.id == step_id)

    def following(self, step_id: str) -> str | None:
        """The step after this one in the order declared; None after the last."""
        ids = [s.id for s in self.steps]
        at = ids.index(step_id)
        return ids[at + 1] if at + 1 < len(ids) else None

    @property
    def tools(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.tool for s in self.steps if s.tool is not None))

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(s.agent for s in self.steps if s.agent is not None))

    def input_fields(self) -> tuple[str, ...]:
        """The fields of the input its templates and conditions read (`input.<field>`): each is required."""
        found: dict[str, None] = {}
        for step in self.steps:
            for path in _step_paths(step):
                if path[0] == "input" and len(path) > 1:
                    found[path[1]] = None
        return tuple(found)

    def shown(self) -> dict[str, Any]:
        return {
            "name": self.name, "description": self.description, "owner": self.owner, "tenant": self.tenant,
            "max_steps": self.max_steps, "input_fields": list(self.input_fields()), "agents": list(self.agents),
            "tools": list(self.tools), "steps": [s.shown() for s in self.steps],
        }  # fmt: skip


def _step_paths(step: WorkflowStep) -> Iterable[tuple[str, ...]]:
    yield from template_paths(dict(step.args) if step.tool else step.input)
    for branch in step.next:
        if branch.condition is not None:
            yield from branch.condition.paths()


# ----- parsing ------------------------------------------------------------------------------------


def parse(data: Any, source: str, agents: Iterable[str], known_tools: set[str] | None = None) -> dict[str, Workflow]:
    """The `workflows:` mapping of the agents file (absent: none)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: `workflows` must be a mapping of workflow names to workflows")
    agent_names = frozenset(agents)
    return {str(name): _workflow(str(name), spec, source, agent_names, known_tools) for name, spec in data.items()}


def _workflow(name: str, spec: Any, source: str, agents: frozenset[str], known_tools: set[str] | None) -> Workflow:
    where = f"{source}: workflow {name!r}"
    if not _NAME.match(name):
        raise ConfigError(f"{where}: a name is 1 to 100 letters, digits, '.', '_' or '-'")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where} must be a mapping")
    unknown = set(spec) - _WORKFLOW_FIELDS
    if unknown:
        raise ConfigError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_WORKFLOW_FIELDS)}")
    if not isinstance(spec.get("owner"), str) or not spec["owner"]:
        raise ConfigError(f"{where}: `owner` is required (the run-as principal, a non-empty string)")
    max_steps = spec.get("max_steps", DEFAULT_MAX_STEPS)
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or not 1 <= max_steps <= MAX_STEPS_LIMIT:
        raise ConfigError(f"{where}: `max_steps` must be a whole number from 1 to {MAX_STEPS_LIMIT}")
    raw_steps = spec.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError(f"{where}: `steps` must be a non-empty list")
    ids = _step_ids(raw_steps, where)
    steps = tuple(_step(raw, where, ids, agents, known_tools) for raw in raw_steps)
    return Workflow(
        name=name, owner=spec["owner"], steps=steps, tenant=str(spec.get("tenant", "default")),
        description=str(spec.get("description", "")), max_steps=max_steps,
    )  # fmt: skip


def _step_ids(raw_steps: list[Any], where: str) -> frozenset[str]:
    ids: list[str] = []
    for i, raw in enumerate(raw_steps):
        if not isinstance(raw, dict):
            raise ConfigError(f"{where}: steps[{i}] must be a mapping")
        step_id = raw.get("id")
        if not isinstance(step_id, str) or not _STEP_ID.match(step_id) or step_id == END:
            raise ConfigError(
                f"{where}: steps[{i}] needs an `id`: a letter or '_' then letters, digits or '_' (not {END!r})"
            )
        if step_id in ids:
            raise ConfigError(f"{where}: step {step_id!r} is declared twice")
        ids.append(step_id)
    return frozenset(ids)


def _step(
    raw: dict[str, Any], where: str, ids: frozenset[str], agents: frozenset[str], known_tools: set[str] | None
) -> WorkflowStep:
    where = f"{where} step {raw['id']!r}"
    unknown = set(raw) - _STEP_FIELDS
    if unknown:
        raise ConfigError(f"{where} has unknown fields {sorted(unknown)}; allowed: {sorted(_STEP_FIELDS)}")
    tool, agent = raw.get("tool"), raw.get("agent")
    if isinstance(tool, str):
        tool = from_agents_file(tool)  # an MCP server's `notes.add_note` is the tool `notes__add_note`
    if (tool is None) == (agent is None):
        raise ConfigError(f"{where}: give either `tool` (with `args`) or `agent` (with `input`), not both or neither")
    if tool is not None:
        if not isinstance(tool, str) or (known_tools is not None and tool not in known_tools and SEPARATOR not in tool):
            raise ConfigError(f"{where}: unknown tool {tool!r}; known: {sorted(known_tools or ())}")
        if tool in _NOT_A_STEP:
            raise ConfigError(f"{where}: tool {tool} cannot be a step: {_NOT_A_STEP[tool]}")
        if "input" in raw:
            raise ConfigError(f"{where}: a tool step takes `args`, not `input`")
        args = raw.get("args", {})
        if not isinstance(args, dict):
            raise ConfigError(f"{where}: `args` must be a mapping of the tool's arguments")
        step = WorkflowStep(raw["id"], tool=tool, args=args, next=_branches(raw.get("next"), where, ids))
    else:
        if not isinstance(agent, str) or agent not in agents:
            raise ConfigError(f"{where}: unknown agent {agent!r}; defined: {sorted(agents)}")
        if "args" in raw:
            raise ConfigError(f"{where}: an agent step takes `input`, not `args`")
        text = raw.get("input")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{where}: `input` is required: what the agent is asked (templates allowed)")
        step = WorkflowStep(raw["id"], agent=agent, input=text, next=_branches(raw.get("next"), where, ids))
    try:
        for path in _step_paths(step):
            problem = path_problem(path, ids)
            if problem is not None:
                raise ConfigError(f"{where}: bad template path {problem}")
    except ExpressionError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return step


def _branches(data: Any, where: str, ids: frozenset[str]) -> tuple[Branch, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ConfigError(f"{where}: `next` must be a list of {{if: <condition>, goto: <step id>}}")
    out: list[Branch] = []
    for i, raw in enumerate(data):
        at = f"{where} next[{i}]"
        if not isinstance(raw, dict) or set(raw) - {"if", "goto"} or "goto" not in raw:
            raise ConfigError(f"{at}: each branch is {{if: <condition>, goto: <step id>}} (no `if`: the default)")
        goto = raw["goto"]
        if goto != END and goto not in ids:
            raise ConfigError(f"{at}: unknown goto {goto!r}; steps: {sorted(ids)} or {END!r}")
        if out and out[-1].condition is None:
            raise ConfigError(f"{at}: comes after the default branch (the one without `if`), so it is never taken")
        condition = None
        if "if" in raw:
            try:
                condition = parse_condition(raw["if"])
            except ExpressionError as exc:
                raise ConfigError(f"{at}: bad condition: {exc}") from None
        out.append(Branch(goto, condition))
    return tuple(out)
