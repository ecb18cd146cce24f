"""I24: a restored run's write is settled as a call in doubt is before it is sent; where it cannot be, an
operator decides. The decision is pure (`engine/settlement.py`, beside `route`)."""

from __future__ import annotations

import pytest

from ticketiq.engine.approvals import binding, restore_binding
from ticketiq.engine.settlement import RESUME_HORIZON_S, Restored, Route, ToolNow, decide_restored, hold_reason
from ticketiq.tools.base import ToolClass

READER = ToolNow(exists=True, has_reader=True, dedupe_window_s=None)
NO_READER = ToolNow(exists=True, has_reader=False, dedupe_window_s=None)
LONG_KEYED = ToolNow(exists=True, has_reader=False, dedupe_window_s=RESUME_HORIZON_S)
SHORT_KEYED = ToolNow(exists=True, has_reader=False, dedupe_window_s=300.0)
GONE = ToolNow(exists=False, has_reader=False, dedupe_window_s=None)


def test_a_write_with_a_reader_is_read_back_before_it_is_sent() -> None:
    # The Jira comment and the Teams reply: found by their key, sent only when absent.
    for cls in (ToolClass.WRITE, ToolClass.KEYED_WRITE):
        assert decide_restored(cls, READER, "tqkey", True, None).route is Route.READ_BACK


def test_a_keyed_write_its_vendor_dedupes_long_is_sent_again_under_its_key() -> None:
    # The incident create: the same key finds the incident the lost steps made.
    made = decide_restored(ToolClass.KEYED_WRITE, LONG_KEYED, "tqkey", True, None)
    assert (made.what, made.route) == (Restored.SETTLE, Route.RESEND_SAME_KEY)


def test_an_idempotent_write_and_a_delegation_go_again_as_after_a_crash() -> None:
    assert decide_restored(ToolClass.IDEMPOTENT_WRITE, NO_READER, "tqkey", True, None).route is Route.RESEND_SAME_ARGS
    assert decide_restored(ToolClass.DELEGATION, NO_READER, "tqkey", True, None).route is Route.DELEGATION


@pytest.mark.parametrize(
    ("cls", "tool_now", "stable"),
    [
        (ToolClass.WRITE, NO_READER, True),  # a webhook: no reader, no dedupe
        (ToolClass.KEYED_WRITE, SHORT_KEYED, True),  # SQS FIFO: deduped for five minutes only
        (ToolClass.KEYED_WRITE, LONG_KEYED, False),  # its key is fresh: the vendor has never seen it
        (ToolClass.WRITE, READER, False),  # no derived key to read it back by
        (ToolClass.REMOTE_AGENT, READER, True),  # no task id yet to read it back by
        (ToolClass.WRITE, GONE, True),
    ],
)
def test_a_write_that_cannot_be_settled_waits_for_an_operator(cls: ToolClass, tool_now: ToolNow, stable: bool) -> None:
    assert decide_restored(cls, tool_now, "tqkey", stable, None).what is Restored.HOLD
    assert decide_restored(cls, tool_now, "tqkey", stable, "pending").what is Restored.HOLD
    # The operator's word decides it, once given: sent (the risk is theirs), or not sent.
    assert decide_restored(cls, tool_now, "tqkey", stable, "approved").what is Restored.SEND
    assert decide_restored(cls, tool_now, "tqkey", stable, "rejected").what is Restored.REFUSE
    assert decide_restored(cls, tool_now, "tqkey", stable, "withdrawn").what is Restored.REFUSE


def test_an_operator_word_never_overrides_a_settlement_that_exists() -> None:
    # A hold is filed only for a write that cannot be settled: one that can is settled whatever is filed.
    assert decide_restored(ToolClass.WRITE, READER, "tqkey", True, "approved").route is Route.READ_BACK


def test_the_reason_names_the_call_the_tool_and_what_to_do() -> None:
    said = hold_reason("webhook_post", 3, 1, "triage.dump taken 2026-12-06 20:01", NO_READER, True)
    assert "call 1 of step 3 (webhook_post)" in said and "triage.dump taken" in said
    assert "no reader" in said and "does not dedupe" in said and "resume the run" in said and "stop it" in said
    assert "dedupes for 300 s only" in hold_reason("sqs_send_message", 1, 0, None, SHORT_KEYED, True)
    assert "only a position" in hold_reason("jira_add_comment", 1, 0, None, READER, False)
    assert "no longer registered" in hold_reason("gone", 1, 0, None, GONE, True)


def test_the_operator_s_word_is_bound_apart_from_the_approval_gate_s() -> None:
    # A decision the approval gate asked for (before the backup, say) never stands for the operator's word.
    args = {"path": "hooks/ops", "payload": {"issue": "OPS-1"}}
    assert restore_binding("r", 1, 0, "webhook_post", "tqkey", args) != binding(
        "r", 1, 0, "webhook_post", "tqkey", args
    )
    assert restore_binding("r", 1, 0, "webhook_post", "tqkey", args) == restore_binding(
        "r", 1, 0, "webhook_post", "tqkey", dict(args)
    )
    assert restore_binding("r", 1, 1, "webhook_post", "tqkey", args) != restore_binding(
        "r", 1, 0, "webhook_post", "tqkey", args
    )
