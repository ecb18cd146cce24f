"""What a follower of a run's timeline is told, from the cursor its last event's id carries
(views/timeline_cursor.py), with no database: what is new or changed and then the end; the id written and
read back; and, over random histories, a stream that ends anywhere and is followed again from its last id
loses nothing and is told nothing twice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketiq.views import timeline_cursor
from ticketiq.views.timeline_cursor import Cursor, Told

TERMINAL = ("succeeded", "failed", "interrupted", "stopped")
T0 = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def follow_on(was: Cursor | None, timeline: dict[str, Any]) -> tuple[list[Told], Cursor]:
    """One batch as the feed tells it: what `timeline` holds for a follower shown `was`, and its cursor."""
    now = timeline_cursor.shown(timeline)
    told = timeline_cursor.told(was, now, timeline, TERMINAL)
    return told, (timeline_cursor.after(now, timeline, TERMINAL) if told else was or now)


def test_a_follower_is_told_what_is_new_or_changed_and_then_the_end() -> None:
    step1 = {"step": 1, "attempt": 1, "started_at": at(1), "ended_at": None, "model_ms": 5.0, "calls": []}
    attempt1 = {"attempt": 1, "process": "p1", "ended": None}
    before = {"run": {"id": "r1", "status": "running", "attempt": 1}, "attempts": [attempt1], "steps": [step1]}
    first, cursor = follow_on(None, before)
    assert [e for e, _ in first] == ["status", "attempt", "step"]
    assert first[0][1] == {"id": "r1", "status": "running", "attempt": 1}
    assert follow_on(cursor, before)[0] == []  # nothing changed: nothing told
    ended1 = {**step1, "ended_at": at(2)}
    step2 = {**step1, "step": 2, "started_at": at(3)}
    after: dict[str, Any] = {"run": {"id": "r1", "status": "succeeded", "attempt": 1},
             "attempts": [{**attempt1, "ended": "finished"}], "steps": [ended1, step2]}  # fmt: skip
    told, last = follow_on(cursor, after)
    assert told == [
        ("status", {"id": "r1", "status": "succeeded", "attempt": 1}),
        ("attempt", {**attempt1, "ended": "finished"}),
        ("step", ended1),
        ("step", step2),
        ("end", {"id": "r1", "status": "succeeded"}),
    ]
    assert last.ended
    # Followed again from the end's id: nothing more to tell.
    assert follow_on(timeline_cursor.decode(last.encode()), after)[0] == []


def test_the_id_is_read_back_as_written_and_one_never_written_is_refused() -> None:
    cursor = Cursor("waiting", 2, {1: "AAAAAAAA", 2: "abc-_123"}, {1: "ZZZZZZZZ", 7: "00000000"}, ended=False)
    assert timeline_cursor.decode(cursor.encode()) == cursor
    assert cursor.encode() == "1~waiting.2~1.AAAAAAAA,2.abc-_123~1.ZZZZZZZZ,7.00000000~"
    ended = Cursor("succeeded", 1, {}, {}, ended=True)
    assert timeline_cursor.decode(ended.encode()) == ended
    for sent in ("", "42", "2~waiting.1~~~", "1~waiting~~~", "1~Waiting.1~~~", "1~waiting.1~1.short~~",
                 "1~waiting.1~x.AAAAAAAA~~", "1~waiting.1~~~done", "1~waiting.1~~", "1~" + "a" * 300_000):  # fmt: skip
        with pytest.raises(ValueError, match="id"):
            timeline_cursor.decode(sent)


def test_a_digest_is_of_what_the_item_shows_whatever_the_order_of_its_keys() -> None:
    one = {"step": 1, "calls": [{"idx": 0, "outcome": "ok"}], "ended_at": at(2)}
    assert timeline_cursor.digest(one) == timeline_cursor.digest(dict(reversed(list(one.items()))))
    assert timeline_cursor.digest(one) != timeline_cursor.digest({**one, "ended_at": at(3)})
    assert len(timeline_cursor.digest(one)) == 8


# ----- random histories ------------------------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A run's timeline as it changes: steps and attempts appear and change, the status moves, and it ends."""
    states: list[dict[str, Any]] = []
    attempts: dict[int, int] = {1: 0}
    steps: dict[int, int] = {}
    status, attempt = "queued", 1
    for _ in range(draw(st.integers(1, 12))):
        match draw(st.sampled_from(["step", "change_step", "attempt", "status", "nothing"])):
            case "step":
                steps[len(steps) + 1] = 0
            case "change_step" if steps:
                steps[draw(st.sampled_from(sorted(steps)))] += 1
            case "attempt":
                attempts[attempt] += 1
                attempt += 1
                attempts[attempt] = 0
            case "status":
                status = draw(st.sampled_from(["running", "waiting", "queued", "answered"]))
        states.append(timeline(status, attempt, attempts, steps))
    attempts[attempt] += 1
    states.append(timeline(draw(st.sampled_from(TERMINAL)), attempt, attempts, steps))
    return states


def timeline(status: str, attempt: int, attempts: dict[int, int], steps: dict[int, int]) -> dict[str, Any]:
    return {
        "run": {"id": "r1", "status": status, "attempt": attempt},
        "attempts": [{"attempt": n, "version": v} for n, v in sorted(attempts.items())],
        "steps": [{"step": n, "version": v, "calls": [{"idx": 0, "v": v}]} for n, v in sorted(steps.items())],
    }


@settings(max_examples=300, deadline=None)
@given(histories(), st.data())
def test_a_stream_that_ends_anywhere_and_follows_on_from_its_last_id_loses_nothing_and_repeats_nothing(
    states: list[dict[str, Any]], data: st.DataObject
) -> None:
    known: dict[tuple[str, int], Any] = {}  # what the follower holds of each attempt and step
    status: tuple[str, int] | None = None
    ends = 0
    cursor: Cursor | None = None
    for i, state in enumerate(states):
        last = i == len(states) - 1
        if not last and not data.draw(st.booleans(), label="the feed read this state"):
            continue  # changes in between are read together
        told, cursor = follow_on(cursor, state)
        for event, item in told:
            if event == "status":
                assert (item["status"], item["attempt"]) != status, "a status told twice"
                status = (item["status"], item["attempt"])
            elif event == "end":
                ends += 1
            else:
                key = (event, item[event])
                assert known.get(key) != item, f"{key} told again unchanged"
                known[key] = item
        if data.draw(st.booleans(), label="the stream ended here"):
            cursor = timeline_cursor.decode(cursor.encode())  # followed again with its Last-Event-ID
    final = states[-1]
    assert status == (final["run"]["status"], final["run"]["attempt"])
    assert {k: v for k, v in known.items() if k[0] == "attempt"} == {("attempt", a["attempt"]): a
                                                                     for a in final["attempts"]}  # fmt: skip
    assert {k: v for k, v in known.items() if k[0] == "step"} == {("step", s["step"]): s for s in final["steps"]}
    assert ends == 1
    assert cursor is not None and cursor.ended
