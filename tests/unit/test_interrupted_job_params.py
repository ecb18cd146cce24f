"""Params of the jobs that are never resumed (classifier training, red team), checked with no I/O: a
bad one is a 422 naming `body.params.<field>`; good ones come back with their defaults."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from ticketiq.agents.catalog import parse
from ticketiq.engine.engine import Engine
from ticketiq.errors import RequestError
from ticketiq.jobs import classifier, red_team
from ticketiq.jobs.kinds import kind

CATALOG = parse({"agents": {"triage": {"system_prompt": "You triage.", "owner": "ops-bot"}}}, "test")
ENGINE = cast(Engine, SimpleNamespace(deps=SimpleNamespace(catalog=CATALOG)))


def refused(check: Any, params: dict[str, Any]) -> str:
    with pytest.raises(RequestError) as caught:
        check(params, ENGINE)
    assert caught.value.status == 422
    return caught.value.field


def test_classifier_params_get_their_defaults() -> None:
    assert classifier.check({}, ENGINE) == {
        "project": None, "labels": None, "epochs": 20, "holdout": 0.2, "pace_s": 0.0,
    }  # fmt: skip
    given = {"project": "OPS", "labels": ["network", "db"], "epochs": 200, "holdout": 0, "pace_s": 0.5}
    assert classifier.check(given, ENGINE) == {**given, "holdout": 0.0}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"epochs": 0}, "body.params.epochs"),
        ({"epochs": 201}, "body.params.epochs"),
        ({"epochs": 2.5}, "body.params.epochs"),
        ({"epochs": True}, "body.params.epochs"),
        ({"epochs": "20"}, "body.params.epochs"),
        ({"holdout": 0.51}, "body.params.holdout"),
        ({"holdout": -0.1}, "body.params.holdout"),
        ({"holdout": "0.2"}, "body.params.holdout"),
        ({"holdout": float("nan")}, "body.params.holdout"),
        ({"pace_s": 11}, "body.params.pace_s"),
        ({"project": ""}, "body.params.project"),
        ({"project": "OPS; DROP TABLE jobs"}, "body.params.project"),
        ({"project": 7}, "body.params.project"),
        ({"labels": ["only-one"]}, "body.params.labels"),
        ({"labels": "network"}, "body.params.labels"),
        ({"labels": ["a", "a"]}, "body.params.labels"),
        ({"labels": ["a", ""]}, "body.params.labels"),
        ({"labels": ["a", "b\x00"]}, "body.params.labels"),
        ({"labels": [f"l{i}" for i in range(21)]}, "body.params.labels"),
        ({"rows": 5}, "body.params.rows"),
    ],
)
def test_bad_classifier_params_name_the_field(params: dict[str, Any], field: str) -> None:
    assert refused(classifier.check, params) == field


def test_a_red_team_set_is_expanded_into_its_prompts() -> None:
    checked = red_team.check({"agent": "triage", "set": "exfiltration"}, ENGINE)
    assert checked == {"agent": "triage", "set": "exfiltration", "prompts": list(red_team.SETS["exfiltration"])}
    assert len(red_team.SETS["basic"]) == sum(len(red_team.SETS[s]) for s in ("jailbreak", "injection", "exfiltration"))
    assert red_team.check({"agent": "triage", "prompts": ["hi"]}, ENGINE) == {
        "agent": "triage", "set": None, "prompts": ["hi"],
    }  # fmt: skip


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"set": "basic"}, "body.params.agent"),
        ({"agent": "nobody", "set": "basic"}, "body.params.agent"),
        ({"agent": 3, "set": "basic"}, "body.params.agent"),
        ({"agent": "triage"}, "body.params.prompts"),
        ({"agent": "triage", "set": "basic", "prompts": ["x"]}, "body.params.set"),
        ({"agent": "triage", "set": "nasty"}, "body.params.set"),
        ({"agent": "triage", "prompts": []}, "body.params.prompts"),
        ({"agent": "triage", "prompts": "hello"}, "body.params.prompts"),
        ({"agent": "triage", "prompts": ["x"] * 201}, "body.params.prompts"),
        ({"agent": "triage", "prompts": ["ok", "  "]}, "body.params.prompts.1"),
        ({"agent": "triage", "prompts": ["ok", "x" * 4001]}, "body.params.prompts.1"),
        ({"agent": "triage", "prompts": ["nul \x00 here"]}, "body.params.prompts.0"),
        ({"agent": "triage", "prompts": ["lone \ud800"]}, "body.params.prompts.0"),
        ({"agent": "triage", "set": "basic", "tools": True}, "body.params.tools"),
    ],
)
def test_bad_red_team_params_name_the_field(params: dict[str, Any], field: str) -> None:
    assert refused(red_team.check, params) == field


def test_both_kinds_are_never_resumed() -> None:
    assert (classifier.KIND.name, classifier.KIND.resumable, classifier.KIND.unit) == (
        "classifier_training", False, "epochs",
    )  # fmt: skip
    assert (red_team.KIND.name, red_team.KIND.resumable, red_team.KIND.unit) == ("red_team", False, "prompts")
    assert kind("classifier_training") is classifier.KIND
    assert kind("red_team") is red_team.KIND
