"""I18, one answer per question: what an input answers, what answered it, and what came of giving it.
Pure rules, no I/O.

An input is bound to the question it answers. A request names that question (`POST
/v1/runs/{id}/input` with `question_id`, as `GET /v1/runs/{id}` lists them), or it answers the oldest
question still pending and is bound to the request itself: an A2A message by its messageId, a POST by
its Idempotency-Key. The inputs row records the binding (`answered_by`, migration 021, unique per run),
written by the statement that gives the input, so the same request sent again, however late, finds the
question it answered and changes nothing: it can never answer the run's next question.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ticketiq.storage.rows import GivenInput


@dataclass(frozen=True)
class Answer:
    """An input as a request gives it: the text, the token giving it, and what it is bound to."""

    text: str
    by: str  # the token's name: the input's `given_by`
    answered_by: str  # what the inputs row records as the request that answered it
    question_id: str | None = None  # the question it names; None: the oldest pending one


def to_question(text: str, by: str, question_id: str) -> Answer:
    """An input naming its question: bound to that question (the same token's same text again is a repeat)."""
    return Answer(text, by, f"question:{by}:{question_id}", question_id)


def by_message(text: str, by: str, message_id: str, question_id: str | None = None) -> Answer:
    """An A2A message naming its task: bound to its messageId, as its token sent it; naming a question
    too (its metadata's `question_id`), it answers exactly that one."""
    return Answer(text, by, f"a2a:{by}:{message_id}", question_id)


def by_key(text: str, by: str, key: str) -> Answer:
    """A POST naming no question: bound to its Idempotency-Key, as its token sent it."""
    return Answer(text, by, f"key:{by}:{key}")


class Verdict(Enum):
    GIVEN = "given"  # this request answered the question; the run goes on
    REPEATED = "repeated"  # this request answered it before: nothing changed
    REUSED = "reused"  # what binds this request answered the question before, with another text
    TAKEN = "taken"  # the question it names was answered by another request
    NO_QUESTION = "no_question"  # the run asked no question by the id it names
    NOT_WAITING = "not_waiting"  # the run waits for no input (for an approval, or it runs or ended)


@dataclass(frozen=True)
class Answered:
    """What giving an input came to: the verdict, the question it was for, and the run's status now."""

    verdict: Verdict
    question_id: str | None
    run_status: str


def judge(found: GivenInput | None, answer: Answer) -> Verdict:
    """What came of an input, from the question the give-input statement found for it (None: none)."""
    if found is None:
        return Verdict.NO_QUESTION if answer.question_id is not None else Verdict.NOT_WAITING
    if found.given:
        return Verdict.GIVEN
    if found.answered_by == answer.answered_by:
        return Verdict.REPEATED if found.text == answer.text else Verdict.REUSED
    if found.status != "pending":
        return Verdict.TAKEN  # only a question the input names is found answered by another
    return Verdict.NOT_WAITING  # still pending, but the run no longer waits (stopped, or ended)
