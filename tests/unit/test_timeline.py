"""The run's timeline assembled from its rows (views/timeline.py), with no database: attempts and how a
takeover settled what it found, steps with their times and calls. What a follower is told of it as it
changes: tests/unit/test_timeline_cursor.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from ticketiq.storage.timeline_store import (
    ApprovalRow,
    AttemptRow,
    CallRow,
    NoteRow,
    ResumedRow,
    TimelineRows,
)
from ticketiq.views import timeline

T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)
RUN = {"id": "r1", "status": "succeeded", "attempt": 2}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def epoch(seconds: float) -> float:
    return at(seconds).timestamp()


def step_note(step: int, calls: list[tuple[str, str]], started: float, model_ms: float, attempt: int = 1,
              kind: str = "model_step") -> NoteRow:  # fmt: skip
    body: dict[str, Any] = {"step": step, "attempt": attempt, "started_at": epoch(started), "model_ms": model_ms}
    if kind == "model_step":
        body["calls"] = [{"id": f"c{i}", "tool": t, "class": c, "key": f"k{step}{i}"} for i, (t, c) in enumerate(calls)]
    return NoteRow(at(started + 5), {"kind": kind, "body": body})


def call(step: int, idx: int, tool: str, cls: str, status: str = "done", result: Any = None,
         settlement: str | None = None, marked: float | None = None, sent: float | None = None,
         back: float | None = None) -> CallRow:  # fmt: skip
    return CallRow(step, idx, 1, tool, cls, f"k{step}{idx}", f"sent{step}{idx}", status,
                   None if result is None else {"result": result}, settlement,
                   None if marked is None else at(marked), None if sent is None else at(sent),
                   None if back is None else at(back))  # fmt: skip


REUSED = {"idx": 0, "tool": "jira_get_issue", "class": "read", "route": "reused", "happened": "reused"}
FOUND = {"idx": 1, "tool": "jira_add_comment", "class": "write", "route": "read_back", "happened": "found"}


def test_attempts_show_the_process_the_ending_and_how_long_a_takeover_took() -> None:
    rows = TimelineRows(
        attempts=[
            AttemptRow(1, "host:11:aaa", at(0), at(0.1), at(4), "lost", None),
            AttemptRow(2, "host:22:bbb", at(4), at(4.75), at(9), "finished", at(4)),
        ],
        resumed=[ResumedRow(at(6), {"step": 2, "attempt": 2, "losses": 1, "calls": [REUSED, FOUND]})],
    )
    shown = timeline.assemble(RUN, rows)
    first, second = shown["attempts"]
    assert (first["process"], first["ended"], first["taken_after_s"], first["settled"]) == ("host:11:aaa", "lost",
                                                                                          None, [])  # fmt: skip
    assert (second["process"], second["ended"], second["lost_detected_at"]) == ("host:22:bbb", "finished", at(4))
    assert second["taken_after_s"] == 0.75  # from the loss found to the new attempt's first statement
    # What the takeover found done is not a settlement; the write in flight is, in the audit's words (I8).
    assert second["settled"] == [{"idx": 1, "step": 2, "tool": "jira_add_comment", "class": "write",
                                  "route": "read_back", "happened": "found"}]  # fmt: skip


def test_steps_have_their_own_times_and_calls_their_mark_send_outcome_and_settlement() -> None:
    rows = TimelineRows(
        resumed=[ResumedRow(at(30), {"step": 2, "attempt": 2, "calls": [
            {"idx": 0, "tool": "probe_write", "class": "write", "route": "read_back", "happened": "found"}]})],
        notes=[step_note(1, [("probe_read", "read")], 1.0, 250.0), step_note(2, [("probe_write", "write")], 2.0, 125.5),
               step_note(3, [], 31.0, 80.0, attempt=2, kind="model_answer")],
        calls=[call(1, 0, "probe_read", "read", result={"ok": True}, sent=1.3, back=1.4),
               call(2, 0, "probe_write", "write", "settled", {"landed": True}, "found", marked=2.2, sent=2.3,
                    back=30.0)],
    )  # fmt: skip
    steps = timeline.assemble(RUN, rows)["steps"]
    assert [(s["step"], s["attempt"], s["started_at"], s["model_ms"]) for s in steps] == [
        (1, 1, at(1.0), 250.0), (2, 1, at(2.0), 125.5), (3, 2, at(31.0), 80.0)]  # fmt: skip
    # A step ends with its last call's answer; the last step, which answered in text, with its model call.
    assert [s["ended_at"] for s in steps] == [at(1.4), at(30.0), at(31.08)]
    read, write = steps[0]["calls"][0], steps[1]["calls"][0]
    assert (read["class"], read["marked_at"], read["sent_at"], read["outcome_at"], read["outcome"], read["key"]) == (
        "read", None, at(1.3), at(1.4), "ok", "sent10")  # fmt: skip
    assert (write["marked_at"], write["sent_at"], write["outcome_at"], write["status"]) == (at(2.2), at(2.3), at(30.0),
                                                                                            "settled")  # fmt: skip
    assert write["settled"] == {"by_attempt": 2, "happened": "found", "at": at(30)}
    assert read["settled"] is None
    assert steps[2]["calls"] == []


def test_a_step_still_in_flight_has_no_end_and_its_calls_say_where_they_stand() -> None:
    rows = TimelineRows(
        notes=[step_note(1, [("probe_read", "read"), ("probe_write", "write"), ("probe_keyed", "keyed_write"),
                             ("request_input", "read"), ("probe_write", "write")], 1.0, 10.0)],
        calls=[call(1, 1, "probe_write", "write", "in_doubt", marked=1.2)],
        pending_calls=[{"step": 1, "idx": 0, "id": "c0", "tool": "probe_read", "class": "read", "step_key": "k10",
                        "outcome": {"result": {"error": "503 from the vendor"}}, "how": "read",
                        "sent_at": epoch(1.1), "outcome_at": epoch(1.15)}],
        approvals=[ApprovalRow("old", 1, 2, "probe_keyed", "rejected", at(0.5), at(0.6)),
                   ApprovalRow("ap-1", 1, 2, "probe_keyed", "pending", at(1.3), None)],
    )  # fmt: skip
    (step,) = timeline.assemble(RUN, rows)["steps"]
    assert step["ended_at"] is None
    read, doubt, held, asked, unmade = step["calls"]
    # A read still riding in the checkpoint shows as the row it lands as.
    sent = datetime.fromtimestamp(epoch(1.1), UTC)
    assert (read["status"], read["outcome"], read["sent_at"]) == ("done", "error", sent)
    assert (doubt["status"], doubt["outcome"], doubt["marked_at"], doubt["sent_at"]) == ("in_doubt", None, at(1.2),
                                                                                          None)  # fmt: skip
    assert (held["status"], held["outcome"], held["approval_id"]) == ("pending", "held", "ap-1")  # the last filed
    assert (asked["outcome"], unmade["outcome"], unmade["status"]) == ("asked", None, "pending")


def test_an_outcome_is_read_from_what_was_recorded() -> None:
    def outcome(result: Any, settlement: str | None = "sent", status: str = "done") -> str | None:
        return timeline.outcome(call(1, 0, "t", "write", status, result, settlement), None, "t")

    assert outcome({"id": "INC-1"}) == "ok"
    assert outcome("plain text") == "ok"
    assert outcome({"error": "409 conflict"}) == "error"
    assert outcome({"refused": "no grant", "gate": "authority"}, "refused") == "refused"
    assert outcome({"outcome": "unknown", "message": "not sent again"}, "unknown_not_sent", "settled") == "unknown"
    assert outcome({"error": None, "outcome": "unknown: the vendor's answer leaves it open"}) == "unknown"
    assert outcome(None, None, "in_doubt") is None
    # Never made: held while its request is pending, withdrawn once its run ended first (issue 32).
    for status, said in (("pending", "held"), ("withdrawn", "withdrawn"), ("rejected", None)):
        request = ApprovalRow("ap-1", 1, 0, "t", status, at(1), None)
        assert timeline.outcome(None, request, "t") == said
