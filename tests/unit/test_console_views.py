"""The console's view decisions (console/views.py): pure functions of the API's dicts."""

from __future__ import annotations

from typing import Any

import pytest

from ticketiq.console import views
from ticketiq.console.views import SPAN


def at(seconds: float) -> str:
    whole, frac = divmod(seconds, 1)
    return f"2026-01-12T09:00:{int(whole):02d}.{round(frac * 1000):03d}+00:00"


def call(idx: int, tool: str, cls: str, marked: float | None, ended: float | None, **more: Any) -> dict[str, Any]:
    mark = at(marked) if marked is not None else None
    return {
        "idx": idx, "tool": tool, "class": cls, "key": f"k{idx}", "marked_at": mark, "sent_at": mark,
        "outcome_at": at(ended) if ended is not None else None, "outcome": more.pop("outcome", "ok"),
        "status": more.pop("status", "done"), "settled": more.pop("settled", None), "approval_id": None, **more,
    }  # fmt: skip


STEPS = [
    {"step": 1, "attempt": 1, "started_at": at(0), "ended_at": at(2), "model_ms": 1000,
     "calls": [call(0, "jira_get_issue", "read", 1.0, 2.0)]},
    {"step": 2, "attempt": 2, "started_at": at(6), "ended_at": at(10), "model_ms": 500,
     "calls": [call(0, "incidentio_create_incident", "write", 6.5, 10.0,
                    settled={"by_attempt": 2, "happened": "resent_same_key", "at": at(9)})]},
]  # fmt: skip


def test_the_waterfall_places_bars_in_proportion_to_their_durations_on_one_axis() -> None:
    fall = views.waterfall(STEPS)
    assert fall.seconds == pytest.approx(10.0)
    first, second = fall.rows
    step, model, read = first.bars
    assert (step.x, step.width) == pytest.approx((0, SPAN * 0.2))
    assert (model.x, model.width, model.seconds) == pytest.approx((0, SPAN * 0.1, 1.0))
    assert (read.x, read.width) == pytest.approx((SPAN * 0.1, SPAN * 0.1)) and read.tone == "ok"
    write = second.bars[2]
    assert (write.x, write.width, write.seconds) == pytest.approx((SPAN * 0.65, SPAN * 0.35, 3.5))
    assert first.seconds == 2.0 and second.attempt == 2


def test_a_call_with_no_outcome_is_drawn_open_to_the_last_moment_known() -> None:
    steps = [{"step": 1, "attempt": 1, "started_at": at(0), "ended_at": None, "model_ms": None,
              "calls": [call(0, "jira_add_comment", "write", 1.0, None, outcome=None, status="in_doubt")]}]  # fmt: skip
    bars = views.waterfall(steps, now=views.when(at(4))).rows[0].bars
    assert [b.open for b in bars] == [True, True]
    assert bars[1].x + bars[1].width == pytest.approx(SPAN)
    assert bars[1].seconds is None and bars[1].tone == "wait"


def test_a_bar_too_short_to_see_still_shows_and_never_leaves_the_row() -> None:
    steps = [{"step": 1, "attempt": 1, "started_at": at(0), "ended_at": at(59), "model_ms": 0.1,
              "calls": [call(0, "probe", "read", 59.0, 59.0)]}]  # fmt: skip
    bars = views.waterfall(steps).rows[0].bars
    assert all(b.width >= views.MIN_BAR for b in bars)
    assert all(b.x + b.width <= SPAN + 1e-9 for b in bars)


def test_no_step_is_an_empty_waterfall() -> None:
    assert views.waterfall([]).rows == []


def test_the_ledger_lists_every_write_by_attempt_and_no_read() -> None:
    found = views.ledger(STEPS)
    assert list(found) == [2]
    (row,) = found[2]
    assert (row.tool, row.key, row.took_s) == ("incidentio_create_incident", "k0", 3.5)
    assert row.settled == {"by_attempt": 2, "happened": "resent_same_key", "at": at(9)}


def test_a_takeover_names_the_process_it_took_the_run_from() -> None:
    attempts = [
        {"attempt": 2, "process": "vm:2:b", "started_at": at(6), "ended_at": at(10), "ended": "finished",
         "taken_after_s": 0.8, "settled": [{"idx": 0, "step": 2, "tool": "t", "class": "write", "route": "r",
                                             "happened": "resent_same_key"}]},
        {"attempt": 1, "process": "vm:1:a", "started_at": at(0), "ended_at": at(3), "ended": "lost",
         "lost_detected_at": at(4), "taken_after_s": None, "settled": []},
    ]  # fmt: skip
    first, second = views.recovery(attempts)
    assert (first.attempt, first.taken_from, first.held_s) == (1, None, 3.0)
    assert (second.attempt, second.taken_from, second.taken_after_s) == (2, "vm:1:a", 0.8)
    assert second.settled[0]["happened"] == "resent_same_key"
    handed = views.recovery([{**attempts[1], "ended": "handed_back"}, attempts[0]])
    assert handed[1].taken_from is None  # a hand-back is no loss


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(None, "—"), (0.0042, "4 ms"), (0.84, "840 ms"), (2.414, "2.41 s"), (185, "3 m 05 s"), (7440, "2 h 04 m")],
)
def test_durations_read_at_a_glance(seconds: float | None, shown: str) -> None:
    assert views.duration(seconds) == shown


def test_filters_keep_known_fields_drop_empty_ones_and_repeat_status() -> None:
    query = [("status", "waiting"), ("status", "running"), ("agent", ""), ("q", " OPS-1 "), ("cursor", "x"),
             ("evil", "1")]  # fmt: skip
    assert views.filters_of(query) == {"status": ["waiting", "running"], "q": ["OPS-1"]}


def test_a_link_keeps_the_filters_and_changes_only_what_it_names() -> None:
    filters = {"status": ["waiting", "running"], "agent": ["triage"]}
    assert views.query_for(filters, cursor="abc") == "status=waiting&status=running&agent=triage&cursor=abc"
    assert views.query_for(filters, agent=None) == "status=waiting&status=running"


def test_counts_name_every_status_in_order_and_link_to_its_filter() -> None:
    counts = views.counts_row({"running": 2, "stopped": 1}, {"status": ["running"], "agent": ["triage"]})
    assert [c.status for c in counts][:3] == ["queued", "running", "waiting"]
    running = next(c for c in counts if c.status == "running")
    assert (running.count, running.selected, running.link) == (2, True, "agent=triage&status=running")
    assert next(c for c in counts if c.status == "queued").count == 0


def test_an_input_the_engine_did_not_take_is_refused_with_why() -> None:
    assert views.input_refusal("given") is None and views.input_refusal("repeated") is None
    assert views.input_refusal("taken") == (409, "this question was answered already, by another input")


def test_the_model_s_final_answer_is_its_own_row_labelled_answer_not_a_step() -> None:
    # The run's `steps` counts the steps that called tools; the answer (a model call asking for no tool)
    # is drawn too, and labelled so the two numbers agree.
    answer = {"step": 3, "attempt": 2, "started_at": at(10), "ended_at": at(11), "model_ms": 1000, "calls": []}
    rows = views.waterfall([*STEPS, answer]).rows
    assert [r.answer for r in rows] == [False, False, True]
    assert [r.bars[0].label for r in rows] == ["step 1", "step 2", "answer"]
    assert [b.kind for b in rows[2].bars] == ["step", "model"]


def test_ended_statuses_are_counted_over_the_last_day_and_say_so() -> None:
    counts = views.counts_row({"waiting": 4, "succeeded": 7}, {})
    recent = {c.status for c in counts if c.recent}
    assert recent == {"succeeded", "failed", "interrupted", "stopped"}
    assert views.RECENT == "made in the last 24 h"
