"""What a repeated Idempotency-Key gets (intake/idempotency.py), with no database: the decision over the
key's row, which answers are kept, which keys are taken, and the TTL floor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.errors import ConfigError
from ticketiq.intake.idempotency import (
    CLAIM_S,
    KEY_MAX_CHARS,
    KeyRow,
    Verdict,
    decide,
    key_problem,
    request_hash,
    worth_keeping,
)
from ticketiq.settings import IDEMPOTENCY_TTL_FLOOR_S, Settings

NOW = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
SAME = request_hash({"agent": "a", "input": "check OPS-1"})
OTHER = request_hash({"agent": "a", "input": "check OPS-2"})


def working(expires_in_s: float = CLAIM_S, alive: bool = True, digest: str = SAME) -> KeyRow:
    return KeyRow(digest, "working", NOW + timedelta(seconds=expires_in_s), alive)


DONE = KeyRow(SAME, "done", None, False)


def test_a_free_key_is_claimed() -> None:
    assert decide(None, SAME, NOW) is Verdict.CLAIM


def test_a_key_answered_for_the_same_request_is_replayed() -> None:
    assert decide(DONE, SAME, NOW) is Verdict.REPLAY


def test_a_key_being_answered_by_a_live_process_is_a_conflict() -> None:
    assert decide(working(), SAME, NOW) is Verdict.WORKING
    assert decide(working(expires_in_s=0.000001), SAME, NOW) is Verdict.WORKING


def test_a_claim_that_lapsed_is_taken_over_even_from_a_live_process() -> None:
    assert decide(working(expires_in_s=0), SAME, NOW) is Verdict.TAKE_OVER  # lapsed at its deadline
    assert decide(working(expires_in_s=-1), SAME, NOW) is Verdict.TAKE_OVER


def test_the_claim_of_a_dead_process_is_taken_over_at_once() -> None:
    assert decide(working(alive=False), SAME, NOW) is Verdict.TAKE_OVER


def test_a_key_used_for_another_request_is_refused_answered_or_not() -> None:
    for row in (
        DONE,
        working(digest=OTHER),
        working(expires_in_s=-1, digest=OTHER),
        working(alive=False, digest=OTHER),
    ):
        assert decide(row, OTHER if row.request_hash == SAME else SAME, NOW) is Verdict.DIFFERENT


@given(
    state=st.sampled_from(["working", "done"]),
    same=st.booleans(),
    expires_in_s=st.none() | st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    alive=st.booleans(),
)
def test_only_the_same_request_ever_gets_an_answer_or_the_key(
    state: str, same: bool, expires_in_s: float | None, alive: bool
) -> None:
    expires = None if expires_in_s is None else NOW + timedelta(seconds=expires_in_s)
    verdict = decide(KeyRow(SAME, state, expires, alive), SAME if same else OTHER, NOW)
    if not same:
        assert verdict is Verdict.DIFFERENT
    elif state == "done":
        assert verdict is Verdict.REPLAY  # an answer is never run again, whoever gave it
    else:
        assert verdict in (Verdict.WORKING, Verdict.TAKE_OVER)
        assert (verdict is Verdict.WORKING) == (alive and expires is not None and expires > NOW)


@pytest.mark.parametrize(("status", "kept"), [(200, True), (201, True), (202, True), (299, True), (199, False),
                                              (304, False), (404, False), (409, False), (422, False), (500, False),
                                              (503, False)])  # fmt: skip
def test_only_a_success_is_kept_so_a_refusal_can_be_retried(status: int, kept: bool) -> None:
    assert worth_keeping(status) is kept


@pytest.mark.parametrize("key", ["k-1", "550e8400-e29b-41d4-a716-446655440000", "a b ~!", "x" * KEY_MAX_CHARS])
def test_printable_keys_up_to_255_characters_are_taken(key: str) -> None:
    assert key_problem(key) is None


@pytest.mark.parametrize(
    ("key", "why"),
    [("", "empty"), ("x" * (KEY_MAX_CHARS + 1), "256 characters"), ("tab\there", "printable"), ("clÃ©", "printable"),
     ("del\x7f", "printable"), ("nul\x00", "printable")],
)  # fmt: skip
def test_other_keys_are_refused_saying_why(key: str, why: str) -> None:
    problem = key_problem(key)
    assert problem is not None and why in problem


def test_a_request_is_the_same_whatever_its_key_order_and_differs_by_any_value() -> None:
    assert request_hash({"a": 1, "b": [1, "x"]}) == request_hash({"b": [1, "x"], "a": 1})
    assert request_hash({"a": 1, "b": [1, "x"]}) != request_hash({"a": 1, "b": [1, "y"]})
    assert request_hash({"approval_id": "1", "decision": "approve"}) != request_hash(
        {"approval_id": "2", "decision": "approve"}
    )


def test_keys_are_kept_at_least_a_day_a_shorter_ttl_is_refused() -> None:
    assert Settings().idempotency_ttl_s == IDEMPOTENCY_TTL_FLOOR_S == 86400
    assert Settings.from_env({"TICKETIQ_IDEMPOTENCY_TTL_S": "172800"}).idempotency_ttl_s == 172800
    with pytest.raises(ConfigError, match="TICKETIQ_IDEMPOTENCY_TTL_S=3600 is below"):
        Settings.from_env({"TICKETIQ_IDEMPOTENCY_TTL_S": "3600"})
    with pytest.raises(ConfigError):
        Settings(idempotency_ttl_s=86399)
