"""The Teams inbox's decisions (intake/teams_inbox.py): what a delivery is, what a turn's row says."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine.state import RunState
from ticketiq.intake.idempotency import key_problem
from ticketiq.intake.teams_inbox import (
    Intake,
    TurnStatus,
    actor,
    content_hash,
    intake,
    reply_detail,
    run_key,
    turn_input,
    turn_status,
)
from ticketiq.intake.teams_turns import REPLY_IDX, reply_call
from ticketiq.storage.teams_store import ReplyTarget

CONVERSATION = "19:ops@thread.tacv2;messageid=1700000000000"
words = st.text(max_size=30)


def test_the_same_words_in_the_same_place_from_the_same_person_are_one_turn_whatever_the_ids() -> None:
    first = content_hash(CONVERSATION, "1700000000000", "29:ana", "is OPS-1 down?")
    assert first == content_hash(CONVERSATION, "1700000000000", "29:ana", "is OPS-1 down?")
    others = [
        content_hash("19:other@thread.tacv2", "1700000000000", "29:ana", "is OPS-1 down?"),
        content_hash(CONVERSATION, "1700000000001", "29:ana", "is OPS-1 down?"),
        content_hash(CONVERSATION, None, "29:ana", "is OPS-1 down?"),
        content_hash(CONVERSATION, "1700000000000", "29:bo", "is OPS-1 down?"),
        content_hash(CONVERSATION, "1700000000000", "29:ana", "is OPS-2 down?"),
        content_hash(CONVERSATION, "1700000000000", "29:ana", "is OPS-1 down?", {"choice": "a"}),
    ]
    assert first not in others and len(set(others)) == len(others)


@given(a=st.tuples(words, words, words, words), b=st.tuples(words, words, words, words))
def test_content_hashes_differ_whenever_any_part_differs(a: tuple[str, ...], b: tuple[str, ...]) -> None:
    assert (content_hash(*a) == content_hash(*b)) == (a == b)


@pytest.mark.parametrize(
    ("same_activity", "duplicate_of", "expected"),
    [
        (None, None, Intake.NEW),
        (None, "1700000000001", Intake.DUPLICATE),
        ((True, False), None, Intake.REDELIVERED),
        ((True, False), "1700000000001", Intake.REDELIVERED),
        ((False, False), None, Intake.UNSTARTED),  # its process died before making the run: made now
        ((False, False), "1700000000001", Intake.UNSTARTED),  # the content match is the row itself
        ((False, True), None, Intake.REFUSED),
    ],
)
def test_what_a_delivery_comes_to(
    same_activity: tuple[bool, bool] | None, duplicate_of: str | None, expected: Intake
) -> None:
    assert intake(same_activity, duplicate_of) is expected


def test_a_turns_run_key_is_derived_and_no_api_caller_can_send_it() -> None:
    key = run_key(CONVERSATION, "1700000000000")
    assert key == run_key(CONVERSATION, "1700000000000")
    assert key != run_key(CONVERSATION, "1700000000001") != run_key("19:other@thread.tacv2", "1700000000000")
    assert key_problem(key) is not None  # the API refuses it as an Idempotency-Key: not printable ASCII
    assert len(key) <= 255


def test_the_actor_is_the_teams_user_never_a_token_name() -> None:
    assert actor("29:ana", "aad-ana") == "teams:aad-ana"
    assert actor("29:ana", None) == "teams:29:ana"


def test_what_the_agent_is_asked_leaves_out_the_bots_mention() -> None:
    assert turn_input("<at>TicketIQ</at> triage OPS-7") == "triage OPS-7"
    assert turn_input("<AT>Ticket\nIQ</AT>hi <at>x</at>there") == "hi there"
    assert turn_input("<at>TicketIQ</at>  ") == ""
    assert turn_input(None, {"ticket": "OPS-7"}) == '{"ticket": "OPS-7"}'
    assert turn_input(None) == ""


@pytest.mark.parametrize(
    ("result", "posted", "reason"),
    [
        ({"id": "1700000000123"}, True, None),
        ({"error": "teams answered 403: Forbidden"}, False, "teams answered 403: Forbidden"),
        ({"error": "teams did not answer", "outcome": "unknown: ..."}, False, "teams did not answer"),
        ({"outcome": "unknown", "message": "outcome unknown: ..."}, False, "outcome unknown: ..."),
        ({"refused": "the run was stopped by ops", "gate": "stop"}, False, "the run was stopped by ops"),
        (None, False, "no reply was posted"),
    ],
)
def test_what_the_hand_on_says_of_the_reply(result: Any, posted: bool, reason: str | None) -> None:
    detail = reply_detail("made", result)
    assert detail["posted"] is posted and detail.get("reason") == reason
    assert detail["happened"] == "made"


@pytest.mark.parametrize(
    ("run_status", "run_error", "reply", "reason", "expected"),
    [
        (None, None, None, None, (TurnStatus.RECEIVED, None)),
        (None, None, None, "no run could be made for it: x", (TurnStatus.FAILED, "no run could be made for it: x")),
        ("queued", None, None, None, (TurnStatus.RUNNING, None)),
        ("running", None, None, None, (TurnStatus.RUNNING, None)),
        ("answered", None, None, None, (TurnStatus.RUNNING, None)),
        ("succeeded", None, {"posted": True, "id": "1"}, None, (TurnStatus.REPLIED, None)),
        ("succeeded", None, {"posted": False, "reason": "stopped"}, None, (TurnStatus.FAILED, "stopped")),
        ("succeeded", None, None, None, (TurnStatus.FAILED, "the run ended without a reply")),
        ("failed", "TICKETIQ_CRASH_RESUME_ENTRIES is false", None, None,
         (TurnStatus.FAILED, "TICKETIQ_CRASH_RESUME_ENTRIES is false")),
        ("interrupted", None, None, None, (TurnStatus.FAILED, "the run interrupted")),
        ("stopped", "stopped by ops", None, None, (TurnStatus.FAILED, "stopped by ops")),
    ],
)  # fmt: skip
def test_a_rows_status_is_read_from_its_run_never_stored(
    run_status: str | None,
    run_error: str | None,
    reply: dict[str, Any] | None,
    reason: str | None,
    expected: tuple[TurnStatus, str | None],
) -> None:
    assert turn_status(run_status, run_error, reply, reason) == expected


@pytest.mark.parametrize("team", [None, "standin-team"])
def test_the_reply_call_carries_the_target_and_a_key_derived_from_the_run(team: str | None) -> None:
    state = RunState(agent="reader", correlation_id="run-1", step=3)
    target = ReplyTarget(1, "a1", CONVERSATION, "https://smba.example/amer/", team, "http://app")
    call = reply_call(state, target, "x" * 30000, "http://app/v1/runs/run-1")
    again = reply_call(state, target, "x" * 30000, "http://app/v1/runs/run-1")
    assert call.step_key == again.step_key and call.step_key is not None
    assert call.idx == REPLY_IDX and call.args["team_id"] == team
    assert len(call.args["text"]) <= 20000 and call.args["text"].endswith(
        "(clipped: the whole answer is at the run's link)"
    )
