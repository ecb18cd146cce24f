from __future__ import annotations

import pytest

from ticketiq.engine.settlement import RESUME_HORIZON_S, CallRow, Route, ToolNow, route
from ticketiq.tools.base import ToolClass

READER = ToolNow(exists=True, has_reader=True, dedupe_window_s=None)
NO_READER = ToolNow(exists=True, has_reader=False, dedupe_window_s=None)
LONG_KEYED = ToolNow(exists=True, has_reader=True, dedupe_window_s=float("inf"))
SHORT_KEYED = ToolNow(exists=True, has_reader=False, dedupe_window_s=300.0)


def doubt(cls: ToolClass, key: str | None = "tqkey") -> CallRow:
    return CallRow(status="in_doubt", tool_class=cls, sent_key=key)


def test_a_call_never_marked_is_made_now_through_the_gates() -> None:
    assert route(None, READER) is Route.MAKE
    assert route(CallRow("pending", ToolClass.WRITE, None), READER) is Route.MAKE


def test_a_recorded_outcome_is_reused_never_made_again() -> None:
    for status in ("done", "settled"):
        assert route(CallRow(status, ToolClass.WRITE, "k", {"result": 1}), READER) is Route.REUSE


def test_an_approval_decided_meanwhile_is_used_instead_of_filing_again() -> None:
    for status in ("approved", "rejected"):
        assert route(None, READER, status) is Route.APPROVAL_DECIDED
    assert route(None, READER, "pending") is Route.MAKE  # filed again: coalesces with the waiting one


def test_a_keyed_write_deduped_longer_than_a_resume_is_resent_with_its_key() -> None:
    assert route(doubt(ToolClass.KEYED_WRITE), LONG_KEYED) is Route.RESEND_SAME_KEY
    assert LONG_KEYED.dedupe_window_s is not None and LONG_KEYED.dedupe_window_s >= RESUME_HORIZON_S


def test_a_keyed_write_whose_call_id_is_only_a_position_is_settled_as_any_other_write() -> None:
    # I11: `call_0` is no identity, so no key was derived; the fresh key it went out with is no ground
    # for a resend. Read back where a reader exists, else reported unknown: never sent again blindly.
    positional = CallRow("in_doubt", ToolClass.KEYED_WRITE, "tf0123456789abcdef0123456", position_only=True)
    assert route(positional, LONG_KEYED) is Route.READ_BACK
    assert route(positional, ToolNow(exists=True, has_reader=False, dedupe_window_s=float("inf"))) is Route.UNKNOWN


def test_a_short_dedupe_window_is_never_trusted_for_a_resend() -> None:
    assert route(doubt(ToolClass.KEYED_WRITE), SHORT_KEYED) is Route.UNKNOWN


def test_other_writes_are_read_back_where_a_reader_exists_else_unknown() -> None:
    assert route(doubt(ToolClass.WRITE), READER) is Route.READ_BACK
    assert route(doubt(ToolClass.WRITE), NO_READER) is Route.UNKNOWN
    assert route(doubt(ToolClass.WRITE, key=None), READER) is Route.UNKNOWN


@pytest.mark.parametrize("cls", [ToolClass.DELEGATION, ToolClass.SUBAGENT])
def test_a_delegation_is_asked_again_by_its_key(cls: ToolClass) -> None:
    assert route(doubt(cls), NO_READER) is Route.DELEGATION


def test_a_marked_write_stays_a_write_when_its_tool_is_gone_or_reclassed() -> None:
    # I10: the class it was marked with rules; a missing tool cannot be read back or resent.
    assert route(doubt(ToolClass.KEYED_WRITE), ToolNow(False, False, None)) is Route.UNKNOWN


def test_only_a_read_back_waits_out_the_time_a_write_can_still_be_in_flight() -> None:
    from ticketiq.engine.settlement import read_back_wait

    assert read_back_wait(Route.READ_BACK, 4.5) == 4.5  # I14
    assert read_back_wait(Route.READ_BACK, -1.0) == 0.0
    for other in (Route.RESEND_SAME_KEY, Route.DELEGATION, Route.UNKNOWN, Route.MAKE, Route.REUSE):
        assert read_back_wait(other, 4.5) == 0.0


def test_a_remote_agent_with_its_task_id_recorded_is_read_back_by_it() -> None:
    recorded = CallRow("in_doubt", ToolClass.REMOTE_AGENT, "tqkey", reference="task-1")
    assert route(recorded, READER) is Route.READ_BACK


def test_a_remote_agent_without_a_task_id_is_unknown_never_sent_again() -> None:
    # I9: no id to find it by; its message may have reached the agent, which dedupes nothing.
    assert route(doubt(ToolClass.REMOTE_AGENT), READER) is Route.UNKNOWN
    assert route(doubt(ToolClass.REMOTE_AGENT, key=None), READER) is Route.UNKNOWN


def test_a_remote_agent_is_never_resent_nor_read_back_without_a_reader_or_its_tool() -> None:
    recorded = CallRow("in_doubt", ToolClass.REMOTE_AGENT, "tqkey", reference="task-1")
    assert route(recorded, NO_READER) is Route.UNKNOWN
    assert route(recorded, ToolNow(False, False, None)) is Route.UNKNOWN
    # Even a tool that claims a long dedupe window is not resent (I10: the marked class rules).
    assert route(recorded, ToolNow(True, False, float("inf"))) is Route.UNKNOWN


def test_a_recorded_reference_changes_nothing_for_other_classes() -> None:
    for cls in (ToolClass.WRITE, ToolClass.KEYED_WRITE):
        assert route(CallRow("in_doubt", cls, None, reference="x"), READER) is Route.UNKNOWN
    assert route(CallRow("in_doubt", ToolClass.DELEGATION, "k", reference="x"), NO_READER) is Route.DELEGATION


def test_a_remote_agent_read_back_by_its_task_id_does_not_wait_out_the_send() -> None:
    from ticketiq.engine.settlement import read_back_wait

    recorded = CallRow("in_doubt", ToolClass.REMOTE_AGENT, "tqkey", reference="task-1")
    # The id came back in the answer to the send: nothing of it is still in flight (no I14 wait).
    assert read_back_wait(Route.READ_BACK, 4.5, recorded) == 0.0
    assert read_back_wait(Route.READ_BACK, 4.5, doubt(ToolClass.WRITE)) == 4.5  # I14 for any other write
    assert read_back_wait(Route.READ_BACK, 4.5, doubt(ToolClass.REMOTE_AGENT)) == 4.5


def test_a_write_read_back_and_not_found_is_sent_once_but_a_remote_agent_never() -> None:
    from ticketiq.engine.settlement import sent_once_if_absent

    assert sent_once_if_absent(ToolClass.WRITE)
    assert sent_once_if_absent(ToolClass.KEYED_WRITE)
    assert not sent_once_if_absent(ToolClass.REMOTE_AGENT)


def test_an_idempotent_write_in_doubt_is_sent_again_with_the_same_arguments() -> None:
    # I10: as marked. Its tool said (and the operator trusts) that the same arguments change nothing more.
    assert route(doubt(ToolClass.IDEMPOTENT_WRITE), NO_READER) is Route.RESEND_SAME_ARGS
    assert route(doubt(ToolClass.IDEMPOTENT_WRITE, key=None), NO_READER) is Route.RESEND_SAME_ARGS
    gone = ToolNow(exists=False, has_reader=False, dedupe_window_s=None)
    assert route(doubt(ToolClass.IDEMPOTENT_WRITE), gone) is Route.UNKNOWN  # nothing to send it with
    # A plain write marked as such stays unknown, whatever its tool is called now.
    assert route(doubt(ToolClass.WRITE), NO_READER) is Route.UNKNOWN
