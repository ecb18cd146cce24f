"""The export's decisions, with no database: which calls are the write ledger, how a line is encoded, how
a retention batch's file is named, and how `--since`/`--until` are read (`ticketiq runs export`)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from ticketiq.cli.export import bounds, parse_when
from ticketiq.errors import RequestError
from ticketiq.views.run_export import batch_name, encoded, write_ledger

NOW = datetime(2026, 12, 6, 20, 0, tzinfo=UTC)


def call(idx: int, cls: str, **kw: Any) -> dict[str, Any]:
    return {"idx": idx, "attempt": 1, "tool": f"t{idx}", "class": cls, "key": f"k{idx}", "marked_at": None,
            "sent_at": None, "outcome_at": None, "outcome": "ok", "status": "done", "settled": None,
            "approval_id": None, **kw}  # fmt: skip


def test_the_write_ledger_is_every_write_of_every_step_with_its_key_mark_send_outcome_and_settlement() -> None:
    marked = datetime(2026, 12, 1, tzinfo=UTC)
    settled = {"by_attempt": 2, "happened": "sent", "at": marked}
    timeline = {"run": {}, "attempts": [], "steps": [
        {"step": 0, "calls": [call(0, "read"), call(1, "write", marked_at=marked, settled=settled)]},
        {"step": 1, "calls": [call(0, "idempotent_write"), call(1, "keyed_write"), call(2, "delegation")]},
        {"step": 2, "calls": []},
    ]}  # fmt: skip
    ledger = write_ledger(timeline)
    assert [(w["step"], w["idx"], w["class"]) for w in ledger] == [
        (0, 1, "write"), (1, 0, "idempotent_write"), (1, 1, "keyed_write")]  # fmt: skip
    assert ledger[0] == {"step": 0, **call(1, "write", marked_at=marked, settled=settled)}
    assert write_ledger({"steps": []}) == []


def test_a_line_is_encoded_as_the_api_encodes_a_body() -> None:
    run_id = uuid.uuid4()
    line = encoded({"run": {"id": run_id, "at": datetime(2026, 12, 1, 8, 30, 0, 120, tzinfo=UTC), "text": "é"}})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"run": {"id": str(run_id), "at": "2026-12-01T08:30:00.000120+00:00", "text": "é"}}
    assert "é".encode() in line  # as Starlette's JSONResponse: not escaped
    with pytest.raises(ValueError, match="JSON"):
        encoded({"x": float("nan")})


def test_a_batch_is_named_by_the_range_of_its_runs_ends_and_a_suffix_of_its_own() -> None:
    first = datetime(2026, 11, 1, 8, 0, 0, 5, tzinfo=UTC)
    last = datetime(2026, 11, 1, 10, 0, tzinfo=timezone(timedelta(hours=1)))
    assert batch_name(first, last, "ab12") == "runs-20261101T080000.000005Z-20261101T090000.000000Z-ab12.jsonl.gz"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T08:00", datetime(2026, 11, 1, 8, tzinfo=UTC)),
        ("2026-11-01T08:00:00Z", datetime(2026, 11, 1, 8, tzinfo=UTC)),
        ("2026-11-01T08:00:00+01:00", datetime(2026, 11, 1, 7, tzinfo=UTC)),
        ("30d", NOW - timedelta(days=30)),
        ("12h", NOW - timedelta(hours=12)),
        ("90m", NOW - timedelta(minutes=90)),
        ("2w", NOW - timedelta(weeks=2)),
        (" 45s ", NOW - timedelta(seconds=45)),
    ],
)
def test_a_time_is_iso_8601_utc_when_it_names_no_offset_or_a_span_back_from_the_database_s_now(
    text: str, named: datetime
) -> None:
    since, until = bounds(parse_when("--since", text), parse_when("--until", "2099-01-01"), NOW)
    assert since == named and since.tzinfo is not None
    assert until == datetime(2099, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "", "30", "-3d", "3 days", "2026-13-01", "12y", "1.5h"])
def test_a_time_that_is_none_is_refused_naming_its_flag(text: str) -> None:
    with pytest.raises(RequestError) as refused:
        parse_when("--until", text)
    assert refused.value.field == "--until" and str(refused.value).startswith("--until: ")


def test_an_empty_or_unreachable_range_is_refused_naming_the_flag() -> None:
    with pytest.raises(RequestError) as empty:
        bounds(parse_when("--since", "1d"), parse_when("--until", "2d"), NOW)
    assert empty.value.field == "--until"
    with pytest.raises(RequestError) as same:
        bounds(parse_when("--since", "2026-11-01"), parse_when("--until", "2026-11-01T00:00:00Z"), NOW)
    assert same.value.field == "--until"
    with pytest.raises(RequestError) as far:
        bounds(parse_when("--since", "999999d"), parse_when("--until", "1d"), NOW)
    assert far.value.field == "--since"
    with pytest.raises(RequestError) as huge:
        parse_when("--since", "99999999999d")
    assert huge.value.field == "--since"
