"""Tool arguments are checked against the tool's JSON schema, with an error a model can act on."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.settings import Settings
from ticketiq.tools.registry import build_registry
from ticketiq.tools.schema import validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 5},
        "count": {"type": "integer", "minimum": 1, "maximum": 10},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "kind": {"type": "string", "enum": ["a", "b"]},
        "code": {"type": "string", "pattern": "^[A-Z]+-[0-9]+$"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        "payload": {"type": "object"},
        "inner": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
            "additionalProperties": False,
        },
    },
    "required": ["name"],
    "additionalProperties": False,
}


def test_arguments_that_fit_pass() -> None:
    args = {
        "name": "ok",
        "count": 3,
        "ratio": 0.5,
        "flag": True,
        "kind": "a",
        "code": "OPS-1",
        "tags": ["t"],
        "payload": {"anything": [1, {"goes": None}]},
        "inner": {"x": 1},
    }
    assert validate(SCHEMA, args) is None


def test_a_missing_required_argument_is_named() -> None:
    assert validate(SCHEMA, {}) == "argument 'name' is required"


def test_an_extra_argument_is_named_with_the_allowed_ones() -> None:
    problem = validate(SCHEMA, {"name": "ok", "colour": "red"})
    assert problem is not None
    assert problem.startswith("argument 'colour' is not allowed (allowed: name, count, ratio")


def test_types_follow_json_not_python() -> None:
    assert validate(SCHEMA, {"name": "ok", "count": True}) == "argument 'count' must be integer, not boolean"
    assert validate(SCHEMA, {"name": "ok", "count": 2.0}) is None
    assert validate(SCHEMA, {"name": "ok", "count": 2.5}) == "argument 'count' must be integer, not number"
    assert validate(SCHEMA, {"name": "ok", "ratio": "1"}) == "argument 'ratio' must be number, not string"
    assert validate(SCHEMA, {"name": None}) == "argument 'name' must be string, not null"
    assert validate(SCHEMA, ["name"]) == "the arguments must be object, not array"


def test_every_problem_is_reported_at_once() -> None:
    problem = validate(SCHEMA, {"name": "", "count": 11, "kind": "c", "code": "ops 1", "tags": ["a", 2, "c"]})
    assert problem is not None
    assert problem.split("; ") == [
        "argument 'name' must have at least 1 characters",
        "argument 'count' must be at most 10",
        "argument 'kind' must be one of 'a', 'b'",
        "argument 'code' must match ^[A-Z]+-[0-9]+$",
        "argument 'tags' must have at most 2 items",
        "argument 'tags[1]' must be string, not integer",
    ]


def test_nested_objects_are_checked_with_their_path() -> None:
    problem = validate(SCHEMA, {"name": "ok", "inner": {"y": 1}})
    assert problem == "argument 'inner.x' is required; argument 'inner.y' is not allowed (allowed: x)"


@given(st.text(min_size=1, max_size=5), st.integers(min_value=1, max_value=10))
def test_any_value_inside_the_bounds_passes(name: str, count: int) -> None:
    assert validate(SCHEMA, {"name": name, "count": count}) is None


@given(st.one_of(st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(), st.lists(st.text())))
def test_a_name_that_is_not_a_string_never_passes(name: Any) -> None:
    problem = validate(SCHEMA, {"name": name})
    assert problem is not None
    assert problem.startswith("argument 'name' must be string")


def test_every_registered_tool_rejects_unknown_arguments_and_accepts_a_well_formed_call() -> None:
    registry = build_registry(Settings())
    samples: dict[str, dict[str, Any]] = {
        "jira_get_issue": {"issue_key": "OPS-1"},
        "jira_list_transitions": {"issue_key": "OPS-1"},
        "jira_add_comment": {"issue_key": "OPS-1", "body": "hi"},
        "jira_transition": {"issue_key": "OPS-1", "transition": "Done"},
        "incidentio_create_incident": {"name": "n", "summary": "s", "severity": "minor"},
        "incidentio_edit_incident": {"incident_id": "01H", "status": "Fixing"},
        "incidentio_list_incidents": {},
        "teams_reply": {"conversation_id": "19:a@thread.tacv2", "activity_id": "1", "text": "t"},
        "discord_send_message": {"channel_id": "ops", "content": "c"},
        "sqs_send_message": {"message_body": "m", "message_group_id": "OPS-1"},
        "webhook_post": {"path": "hooks/ops", "payload": {"a": 1}},
        "ask_remote_agent": {"text": "is OPS-1 safe to close?"},
        # The example tool package's (examples/ticketiq-tasks), which `make test` installs.
        "tasks_get": {"task_id": "T-1"},
        "tasks_create": {"title": "Call the customer back"},
    }
    assert set(samples) == set(registry.tools)
    for name, args in samples.items():
        schema = registry.tools[name].parameters
        assert validate(schema, args) is None, name
        assert validate(schema, {**args, "unexpected": 1}) is not None, name


def test_a_webhook_path_cannot_leave_the_configured_target() -> None:
    tool = build_registry(Settings()).tools["webhook_post"]
    for path in ("../admin", "hooks/../../x", "..", "./x", "/abs", "http://elsewhere/x", "a//b", "a/./b"):
        assert validate(tool.parameters, {"path": path, "payload": {}}) is not None, path
    assert validate(tool.parameters, {"path": "hooks/v1.2/ops", "payload": {}}) is None
