from __future__ import annotations

from datetime import UTC, datetime

from ticketiq.engine.approvals import binding, for_call, not_approved, undecided
from ticketiq.storage.rows import Approval


def test_a_binding_is_the_same_for_the_same_call_and_differs_for_any_other() -> None:
    base = ("run-1", 2, 0, "jira_transition", "tqkey", {"issue_key": "OPS-1", "transition": "Done"})
    assert binding(*base) == binding(*base)
    assert binding(*base) == binding(
        "run-1", 2, 0, "jira_transition", "tqkey", {"transition": "Done", "issue_key": "OPS-1"}
    )
    for other in (
        ("run-2", *base[1:]),
        ("run-1", 3, *base[2:]),
        ("run-1", 2, 1, *base[3:]),
        ("run-1", 2, 0, "jira_add_comment", *base[4:]),
        ("run-1", 2, 0, "jira_transition", None, base[5]),
        ("run-1", 2, 0, "jira_transition", "tqkey", {"issue_key": "OPS-1", "transition": "To Do"}),
    ):
        assert binding(*other) != binding(*base)


def test_the_request_for_a_call_is_found_by_its_binding_only() -> None:
    def approval(bound: str) -> Approval:
        now = datetime.now(UTC)
        return Approval("a", "r", 1, 0, "t", {}, None, bound, "approved", "bob", None, now, now)

    filed = [approval("x"), approval("y")]
    assert for_call(filed, "y") is filed[1]
    assert for_call(filed, "z") is None


def _request(status: str, decided_by: str | None = None, reason: str | None = None) -> Approval:
    now = datetime.now(UTC)
    return Approval("ap-1", "r", 1, 0, "t", {}, None, "b", status, decided_by, reason, now, now)


def test_a_decision_that_matched_nothing_says_why() -> None:
    withdrawn = _request("withdrawn", reason="its run ended (stopped): stopped by ops")
    assert undecided("ap-1", withdrawn, None) == (
        "approval ap-1 was withdrawn, so nothing was decided: its run ended (stopped): stopped by ops"
    )
    # Left pending by a run the previous release ended (migration 033): its run's status says why.
    assert (
        undecided("ap-1", _request("pending"), "failed")
        == "approval ap-1 can no longer be decided: its run ended (failed)"
    )
    assert undecided("ap-1", _request("approved", "bob"), None) == "approval ap-1 was already approved"


def test_only_an_approval_lets_a_held_call_go_and_the_model_is_told_why_not() -> None:
    assert not_approved(_request("rejected", "bob", "no")) == "approval rejected by bob"
    assert not_approved(_request("withdrawn", reason="its run ended (failed): x")) == (
        "approval withdrawn: its run ended (failed): x"
    )
