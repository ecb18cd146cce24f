"""Workflow templates and conditions (`values/workflow_values.py`): pure, no database."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.values.workflow_values import (
    ExpressionError,
    MissingValue,
    Scope,
    compare,
    parse_condition,
    parse_path,
    path_problem,
    render,
    template_paths,
)

SCOPE = Scope(
    input={"issue": "OPS-7", "count": 2, "tags": ["a", "b"], "nested": {"deep": [10, {"x": True}]}},
    outputs={"read": {"fields": {"summary": "Checkout fails", "status": {"name": "To Do"}}}, "ask": "All good."},
    visits={"read": 1, "ask": 1},
    executed=2,
)
STEPS = frozenset({"read", "ask", "comment"})


def test_a_whole_string_template_keeps_the_json_type_and_text_templates_interpolate() -> None:
    assert render("{{ input.count }}", SCOPE) == 2
    assert render("{{steps.read.output.fields}}", SCOPE) == SCOPE.outputs["read"]["fields"]
    assert render("{{ input.nested.deep.1.x }}", SCOPE) is True
    assert render("Issue {{ input.issue }} after {{ executed }} steps: {{ input.tags }}", SCOPE) == (
        'Issue OPS-7 after 2 steps: ["a", "b"]'
    )
    assert render({"a": ["{{ steps.ask.output }}", 3], "b": "{{ steps.read.visits }}"}, SCOPE) == {
        "a": ["All good.", 3],
        "b": 1,
    }
    assert render("{{ steps.comment.visits }}", SCOPE) == 0  # a step that never ran was visited 0 times


@pytest.mark.parametrize(
    "template",
    [
        "{{ input.missing }}",
        "{{ input.tags.5 }}",
        "{{ input.issue.more }}",
        "x {{ steps.comment.output }}",  # the step has not run
        "{{ steps.read.output.fields.summary.0 }}",
    ],
)
def test_a_path_that_names_nothing_is_a_missing_value_naming_the_path(template: str) -> None:
    with pytest.raises(MissingValue) as raised:
        render(template, SCOPE)
    assert raised.value.path in template


def test_template_paths_are_found_in_nested_arguments_and_bad_templates_refused() -> None:
    found = list(template_paths({"a": "{{ input.issue }} and {{steps.read.output.x}}", "b": [{"c": "{{executed}}"}]}))
    assert found == [("input", "issue"), ("steps", "read", "output", "x"), ("executed",)]
    for bad in ("{{ input.issue + 1 }}", "{{ }}", "{{ input.issue", "left }} over"):
        with pytest.raises(ExpressionError):
            list(template_paths(bad))


@pytest.mark.parametrize(
    ("path", "problem"),
    [
        ("input.issue", None),
        ("executed", None),
        ("steps.read.output", None),
        ("steps.read.output.fields.0.x", None),
        ("steps.read.visits", None),
        ("env.HOME", "starts with input, steps or executed"),
        ("executed.more", "has no fields"),
        ("steps.read", "name a step and what of it"),
        ("steps.nope.output", "no step 'nope'"),
        ("steps.read.result", "not 'result'"),
        ("steps.read.visits.x", "has no fields"),
    ],
)
def test_path_problems_are_found_at_load(path: str, problem: str | None) -> None:
    found = path_problem(parse_path(path), STEPS)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ('steps.read.output.fields.status.name == "To Do"', True),
        ("steps.read.output.fields.status.name != 'Done'", True),
        ("input.count < 3", True),
        ("input.count >= 3", False),
        ("executed <= 2 and steps.read.visits == 1", True),
        ("steps.comment.visits < 2", True),
        ('input.tags contains "b"', True),
        ('"c" in input.tags', False),
        ('steps.ask.output contains "good"', True),
        ('input.nested contains "deep"', True),
        ("input.missing", False),  # a missing value is null: false
        ("input.missing == null", True),
        ("not input.missing", True),
        ("input.issue", True),
        ("input.count == 2.0", True),
        ("input.nested.deep.1.x == true", True),
        ("input.nested.deep.1.x == 1", False),  # JSON: true is not 1
        ('input.count < "3"', False),  # a number and a string do not compare
        ("input.count > 1 or input.missing.x > 5", True),
        ("(input.count > 5 or executed == 2) and not (input.issue == 'OPS-8')", True),
        ("-1 < input.count", True),
    ],
)
def test_conditions_decide_over_the_same_values(text: str, holds: bool) -> None:
    condition = parse_condition(text)
    assert condition.holds(SCOPE) is holds


@pytest.mark.parametrize(
    "text",
    ["", "input.count <", "input.count < 3 3", "(input.count", "input.count === 3", "__import__('os')", "a ; b", 3],
)
def test_a_condition_that_is_not_the_small_language_is_refused(text: Any) -> None:
    with pytest.raises(ExpressionError):
        parse_condition(text)


def test_a_condition_names_the_paths_it_reads() -> None:
    condition = parse_condition('steps.check.output.count < 3 and not "x" in input.tags')
    assert condition.paths() == [("steps", "check", "output", "count"), ("input", "tags")]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(-5, 5, allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=6,
)


@given(_JSON, _JSON)
def test_equality_and_inequality_are_opposites_and_symmetric(left: Any, right: Any) -> None:
    assert compare("==", left, right) is not compare("!=", left, right)
    assert compare("==", left, right) is compare("==", right, left)
    assert compare("==", left, left)


@given(st.integers(-100, 100), st.integers(-100, 100))
def test_number_order_is_python_order(left: int, right: int) -> None:
    assert compare("<", left, right) is (left < right)
    assert compare(">=", left, right) is (left >= right)
