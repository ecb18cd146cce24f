"""I18, one answer per question: what an input is bound to, and what came of giving it, as judged from
the question the give-input statement found."""

from __future__ import annotations

import pytest

from ticketiq.engine.questions import Answer, Verdict, by_key, by_message, judge, to_question
from ticketiq.storage.rows import GivenInput

QUESTION = "5b0c2a4e-0000-4000-8000-000000000001"


def found(status: str = "pending", text: str | None = None, answered_by: str | None = None, run_status: str = "waiting",
          given: bool = False) -> GivenInput:  # fmt: skip
    return GivenInput(QUESTION, "Delete the staging database?", status, text, answered_by, run_status, given)


def test_each_binding_names_its_request_and_its_token() -> None:
    assert to_question("yes", "ops", QUESTION) == Answer("yes", "ops", f"question:ops:{QUESTION}", QUESTION)
    assert by_message("yes", "ops", "m-1") == Answer("yes", "ops", "a2a:ops:m-1")
    assert by_key("yes", "ops", "k-1") == Answer("yes", "ops", "key:ops:k-1")


ANSWER = by_key("yes", "ops", "k-1")
NAMED = to_question("yes", "ops", QUESTION)


@pytest.mark.parametrize(
    ("question", "answer", "verdict"),
    [
        (found(given=True), ANSWER, Verdict.GIVEN),
        (found("given", "yes", ANSWER.answered_by, "running"), ANSWER, Verdict.REPEATED),
        (found("given", "yes", ANSWER.answered_by, "succeeded"), ANSWER, Verdict.REPEATED),  # however late
        (found("given", "no", ANSWER.answered_by), ANSWER, Verdict.REUSED),
        (found("given", "yes", NAMED.answered_by), NAMED, Verdict.REPEATED),
        (found("given", "yes", "question:op-2:" + QUESTION), NAMED, Verdict.TAKEN),  # another token's
        (found("given", "yes", None), NAMED, Verdict.TAKEN),  # given before bindings were recorded
        (None, NAMED, Verdict.NO_QUESTION),
        (None, ANSWER, Verdict.NOT_WAITING),
        (found("pending", run_status="failed"), ANSWER, Verdict.NOT_WAITING),  # stopped while it waited
        (found("pending", run_status="failed"), NAMED, Verdict.NOT_WAITING),
    ],
)
def test_what_came_of_an_input(question: GivenInput | None, answer: Answer, verdict: Verdict) -> None:
    assert judge(question, answer) is verdict
