from __future__ import annotations

from datetime import UTC, datetime

from ticketiq.engine.approvals import binding, for_call
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
