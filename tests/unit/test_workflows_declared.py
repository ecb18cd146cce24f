"""Workflows in the agents file and a run's decisions (`agents/workflows.py`, `jobs/workflow_plan.py`):
what a file may declare, which step comes next, when the loop bound stops a run, which key a step
sends, and which inputs can start a workflow. Pure: no database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ticketiq.agents.catalog import Catalog, load, parse
from ticketiq.agents.workflows import Workflow
from ticketiq.errors import ConfigError
from ticketiq.jobs.workflow_plan import WorkflowState, following, input_problem, over_bound, step_key
from ticketiq.settings import Settings
from ticketiq.tools.registry import build_registry

TOOLS = build_registry(Settings()).tools
AGENTS = {"reader": {"system_prompt": "Read.", "owner": "ops-bot", "tools": ["jira_get_issue"]}}


def flow_file(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"agents": AGENTS, "workflows": {"w": {"owner": "flows", "steps": steps, **extra}}}


def parsed(steps: list[dict[str, Any]], **extra: Any) -> Workflow:
    return parse(flow_file(steps, **extra), "agents.yaml", set(TOOLS)).workflows["w"]


READ = {"id": "read", "tool": "jira_get_issue", "args": {"issue_key": "{{ input.issue }}"}}
COMMENT = {
    "id": "comment",
    "tool": "jira_add_comment",
    "args": {"issue_key": "{{ input.issue }}", "body": "{{ steps.read.output.fields.summary }}"},
}


def test_the_sample_workflow_loads_and_its_owner_is_granted_its_tools() -> None:
    catalog = load(Path(Settings().agents), known_tools=set(TOOLS) | {"delegate_to_agent", "knowledge_search"})
    flow = catalog.workflows["follow-up"]
    assert [s.id for s in flow.steps] == ["read", "summarise", "comment", "check"]
    assert (flow.owner, flow.tenant, flow.max_steps, flow.input_fields()) == ("ops-bot", "acme", 10, ("issue",))
    assert flow.agents == ("reader",) and flow.tools == ("jira_get_issue", "jira_add_comment")
    assert {"jira_get_issue", "jira_add_comment"} <= set(catalog.owner_tools()["ops-bot"])


def test_a_workflow_owner_is_seeded_the_grants_of_its_tool_steps() -> None:
    catalog = parse(flow_file([READ, COMMENT]), "agents.yaml", set(TOOLS))
    assert catalog.owner_tools()["flows"] == ["jira_get_issue", "jira_add_comment"]
    assert parse({"agents": AGENTS}, "agents.yaml").workflows == {}  # none declared: none


@pytest.mark.parametrize(
    ("steps", "extra", "message"),
    [
        ([{"id": "a", "tool": "jira_nope", "args": {}}], {}, r"workflow 'w' step 'a': unknown tool 'jira_nope'"),
        ([{"id": "a", "agent": "ghost", "input": "x"}], {}, r"workflow 'w' step 'a': unknown agent 'ghost'"),
        ([{**READ, "next": [{"goto": "nowhere"}]}], {}, r"workflow 'w' step 'read' next\[0\]: unknown goto 'nowhere'"),
        ([{**READ, "args": {"issue_key": "{{ input.issue"}}], {}, r"step 'read': .*outside a template"),
        ([{**READ, "args": {"issue_key": "{{ steps.later.output }}"}}], {}, r"step 'read': bad template path.*'later'"),
        ([{**READ, "args": {"issue_key": "{{ env.HOME }}"}}], {}, r"step 'read': bad template path env.HOME"),
        ([{**READ, "next": [{"if": "steps.read.output ==", "goto": "read"}]}], {}, r"step 'read' next\[0\]: bad cond"),
        ([{**READ, "next": [{"if": "steps.x.visits < 2", "goto": "read"}]}], {}, r"step 'read': bad template path"),
        ([{**READ, "next": [{"goto": "end"}, {"if": "executed < 2", "goto": "read"}]}], {}, r"after the default"),
        ([READ, READ], {}, r"step 'read' is declared twice"),
        ([{"id": "end", "tool": "jira_get_issue"}], {}, r"steps\[0\] needs an `id`"),
        ([{"id": "a", "tool": "jira_get_issue", "agent": "reader"}], {}, r"step 'a': give either `tool`"),
        ([{"id": "a", "agent": "reader"}], {}, r"step 'a': `input` is required"),
        ([{"id": "a", "tool": "delegate_to_agent"}], {}, r"step 'a': tool delegate_to_agent cannot be a step"),
        ([{"id": "a", "tool": "jira_get_issue", "with": 1}], {}, r"step 'a' has unknown fields \['with'\]"),
        ([], {}, r"workflow 'w': `steps` must be a non-empty list"),
        ([READ], {"max_steps": 0}, r"workflow 'w': `max_steps` must be a whole number"),
        ([READ], {"max_steps": True}, r"`max_steps` must be a whole number"),
        ([READ], {"loops": 3}, r"workflow 'w' has unknown fields \['loops'\]"),
    ],
)
def test_a_bad_workflow_is_refused_at_load_naming_the_workflow_and_step(
    steps: list[dict[str, Any]], extra: dict[str, Any], message: str
) -> None:
    known = set(TOOLS) | {"delegate_to_agent"}
    with pytest.raises(ConfigError, match=message):
        parse(flow_file(steps, **extra), "agents.yaml", known)


def test_an_owner_is_required(tmp_path: Path) -> None:
    path = tmp_path / "agents.yaml"
    path.write_text(yaml.safe_dump({"agents": AGENTS, "workflows": {"w": {"steps": [READ]}}}))
    with pytest.raises(ConfigError, match=r"workflow 'w': `owner` is required"):
        load(path, known_tools=set(TOOLS))


LOOP: list[dict[str, Any]] = [
    READ,
    COMMENT,
    {
        "id": "check",
        "tool": "jira_get_issue",
        "args": {"issue_key": "{{ input.issue }}"},
        "next": [
            {"if": 'steps.check.output.fields.status.name == "Done"', "goto": "end"},
            {"if": "steps.comment.visits < 2", "goto": "comment"},
        ],
    },
    {"id": "after", "tool": "jira_get_issue", "args": {"issue_key": "{{ input.issue }}"}},
]


def walk(flow: Workflow, statuses: list[str], run_id: str = "run-1") -> list[tuple[str, str]]:
    """Execute the workflow's decisions with `check` answering each status in turn: (step, key) pairs."""
    state = WorkflowState.begin(flow)
    done: list[tuple[str, str]] = []
    answers = iter(statuses)
    while state.at is not None and over_bound(flow, state) is None:
        step = flow.step(state.at)
        key = step_key(run_id, state)
        output = {"fields": {"status": {"name": next(answers)}, "summary": "s"}} if step.id == "check" else {}
        done.append((step.id, key))
        state.executed_step(step.id, key, output)
        state.at = following(flow, step, state.scope({"issue": "OPS-1"}))
    return done


def test_next_takes_the_first_branch_that_holds_else_the_next_step_in_order() -> None:
    flow = parsed(LOOP)
    assert [s for s, _ in walk(flow, ["To Do", "To Do"])] == ["read", "comment", "check", "comment", "check", "after"]
    assert [s for s, _ in walk(flow, ["Done"])] == ["read", "comment", "check"]  # goto end
    assert [s for s, _ in walk(flow, ["To Do", "Done"])] == ["read", "comment", "check", "comment", "check"]


def test_a_loop_back_sends_a_new_key_and_a_step_executed_again_the_same() -> None:
    flow = parsed(LOOP)
    steps = walk(flow, ["To Do", "To Do"])
    comments = [key for step, key in steps if step == "comment"]
    assert len(comments) == 2 and comments[0] != comments[1]  # I11: a loop back is a new key
    assert len({key for _, key in steps}) == len(steps)
    assert steps == walk(flow, ["To Do", "To Do"])  # derived, never from the clock or chance
    assert walk(flow, ["To Do", "To Do"], run_id="run-2")[0][1] != steps[0][1]  # another run: other keys
    # A step executed again after a crash: nothing was saved since it began, so the state is the same.
    state = WorkflowState.from_json(WorkflowState(at="comment", executed=3).to_json(), flow)
    assert step_key("run-1", state) == step_key("run-1", WorkflowState(at="comment", executed=3))


def test_max_steps_ends_a_runaway_loop_with_the_reason() -> None:
    forever = [{**READ, "next": [{"goto": "read"}]}]
    flow = parsed(forever, max_steps=5)
    assert [s for s, _ in walk(flow, [])] == ["read"] * 5
    state = WorkflowState(at="read", executed=5, history=[{"seq": 5, "step": "read", "key": "k"}])
    why = over_bound(flow, state)
    assert why is not None and "max_steps reached" in why and "max_steps 5" in why and "'read'" in why
    assert over_bound(flow, WorkflowState(at="read", executed=4)) is None
    assert over_bound(flow, WorkflowState(at=None, executed=9)) is None  # an ended run is not over it
    assert parsed([READ]).max_steps == 20  # the default


def test_the_state_round_trips_through_json() -> None:
    flow = parsed(LOOP)
    state = WorkflowState(
        at="check", executed=2, outputs={"read": {"a": 1}}, visits={"read": 1, "comment": 1},
        in_doubt={"seq": 3, "step": "check"}, history=[{"seq": 1, "step": "read", "key": "k"}],
    )  # fmt: skip
    assert WorkflowState.from_json(state.to_json(), flow) == state
    assert WorkflowState.from_json({}, flow) == WorkflowState(at="read")  # a run that saved nothing yet


@pytest.mark.parametrize(
    ("given", "field", "message"),
    [
        ({"issue": "OPS-1"}, None, None),
        ({"issue": "OPS-1", "extra": 1}, None, None),
        ({}, "issue", "reads input.issue: it is required"),
        ({"issue": "not a key"}, "issue", "argument 'issue_key' must match"),
        ({"issue": 7}, "issue", "argument 'issue_key' must be string"),
        (["OPS-1"], "", "must be a JSON object"),
    ],
)
def test_an_input_that_cannot_start_the_workflow_is_named(given: Any, field: str | None, message: str | None) -> None:
    problem = input_problem(parsed(LOOP), given, TOOLS)
    if field is None:
        assert problem is None
    else:
        assert problem is not None and problem.field == field and str(message) in problem.message


def test_the_declaration_is_shown_as_written() -> None:
    catalog: Catalog = parse(flow_file(LOOP, description="d", max_steps=7), "agents.yaml", set(TOOLS))
    shown = catalog.workflows["w"].shown()
    assert shown["steps"][2]["next"] == [
        {"if": 'steps.check.output.fields.status.name == "Done"', "goto": "end"},
        {"if": "steps.comment.visits < 2", "goto": "comment"},
    ]
    assert (shown["max_steps"], shown["description"], shown["input_fields"]) == (7, "d", ["issue"])
