"""The run list's pure decisions: what a query asks (each refusal naming its parameter), the cursor
(round trip; anything else is `query.cursor`), the page and its next cursor, and how a run and what it
waits for are shown."""

from __future__ import annotations

import base64
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.errors import RequestError
from ticketiq.storage.rows import Waiting
from ticketiq.views import run_list
from ticketiq.views.run_list import Position, RunQuery, decode_cursor, encode_cursor, parse_query

RUN = "5b0c2a4e-0000-4000-8000-000000000001"


def refused(params: dict[str, Any]) -> RequestError:
    with pytest.raises(RequestError) as caught:
        parse_query(params)
    assert caught.value.status == 422
    return caught.value


def test_no_parameters_ask_for_the_newest_fifty_runs() -> None:
    assert parse_query({}) == RunQuery(limit=50)


def test_every_filter_is_read() -> None:
    cursor = encode_cursor(Position(datetime(2025, 5, 1, 8, tzinfo=UTC), RUN))
    query = parse_query({
        "status": ["waiting", "running"], "agent": " triage ", "channel": "teams", "created_by": "ops-ana",
        "since": "2025-05-01", "until": "2025-05-02T08:00:00Z", "q": "OPS-12 outage", "limit": "500",
        "cursor": cursor,
    })  # fmt: skip
    assert query == RunQuery(
        statuses=("running", "waiting"),
        agent="triage",
        channel="teams",
        created_by="ops-ana",
        since=datetime(2025, 5, 1, tzinfo=UTC),
        until=datetime(2025, 5, 2, 8, tzinfo=UTC),
        q="OPS-12 outage",
        limit=500,
        cursor=cursor,
    )


def test_status_repeats_or_lists_several_and_each_is_a_status_a_run_has() -> None:
    assert parse_query({"status": "stopped"}).statuses == ("stopped",)
    assert parse_query({"status": ["failed,stopped", "failed"]}).statuses == ("failed", "stopped")
    error = refused({"status": ["waiting", "cancelled"]})
    assert (error.field, "'cancelled'" in error.message) == ("query.status", True)
    assert "stopped" in error.message  # the message lists what a run can be


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"state": "waiting"}, "query.state"),  # unknown: a typo is not a filter silently dropped
        ({"agent": ["a", "b"]}, "query.agent"),  # given twice
        ({"agent": ""}, "query.agent"),
        ({"channel": "x" * 201}, "query.channel"),
        ({"created_by": "  "}, "query.created_by"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "501"}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"since": "yesterday"}, "query.since"),
        ({"until": "2025-13-01"}, "query.until"),
        ({"since": "2025-05-02", "until": "2025-05-01"}, "query.until"),
        ({"since": "2025-05-01", "until": "2025-05-01"}, "query.until"),
        ({"q": "!!! -- ?"}, "query.q"),  # no word to search for
        ({"q": "x" * 201}, "query.q"),
        ({"cursor": "not-a-cursor"}, "query.cursor"),
    ],
)
def test_a_bad_parameter_is_refused_by_its_name(params: dict[str, Any], field: str) -> None:
    assert refused(params).field == field


def test_a_time_without_an_offset_is_utc_and_an_unencoded_plus_still_reads_as_one() -> None:
    assert parse_query({"since": "2025-05-01T08:00:00"}).since == datetime(2025, 5, 1, 8, tzinfo=UTC)
    # `+02:00` sent unencoded in a URL arrives as ` 02:00`.
    since = parse_query({"since": "2025-05-01T08:00:00 02:00"}).since
    assert since == datetime(2025, 5, 1, 6, tzinfo=UTC)


moments = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))]),
)  # fmt: skip


@given(moments, st.uuids())
def test_a_cursor_names_the_run_it_was_made_of(at: datetime, run_id: uuid.UUID) -> None:
    position = Position(at, str(run_id))
    cursor = encode_cursor(position)
    assert decode_cursor(cursor) == position
    assert parse_query({"cursor": cursor}).cursor == cursor
    assert str(run_id) not in cursor  # opaque: clients do not build one


@given(st.text(max_size=300))
def test_anything_but_a_cursor_the_list_made_is_refused_as_query_cursor(text: str) -> None:
    refusal: RequestError | None = None
    try:
        position = decode_cursor(text)
    except RequestError as error:
        refusal = error
    if refusal is not None:
        assert (refusal.field, refusal.status) == ("query.cursor", 422)
    else:  # only a well-formed cursor gets here: it is the one encode makes of what it names
        assert encode_cursor(position) == text


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode("latin-1")).decode().rstrip("=")


@pytest.mark.parametrize(
    "text",
    [
        encode_cursor(Position(datetime(2025, 5, 1, tzinfo=UTC), RUN))[:-3],  # cut short
        b64(f"2|2025-05-01T00:00:00+00:00|{RUN}"),  # another version
        b64(f"1|2025-05-01T00:00:00|{RUN}"),  # a time with no offset
        b64("1|2025-05-01T00:00:00+00:00|not-a-uuid"),
        b64(f"1|2025-05-01T00:00:00+00:00|{RUN.upper()}"),  # not as the list writes it
        b64(f"1|2025-05-01T00:00:00+00:00|{RUN}|more"),
        "/w==",  # not url-safe base64
        encode_cursor(Position(datetime(2025, 5, 1, tzinfo=UTC), RUN)) + "==",  # padded
        "!" + encode_cursor(Position(datetime(2025, 5, 1, tzinfo=UTC), RUN)),  # a stray character
        b64("\xff\xfe"),  # not text
        "",
    ],
)
def test_a_tampered_cursor_is_refused(text: str) -> None:
    with pytest.raises(RequestError) as caught:
        decode_cursor(text)
    assert caught.value.field == "query.cursor"


def row(n: int, status: str = "succeeded", **wait: Any) -> dict[str, Any]:
    at = datetime(2025, 5, 1, tzinfo=UTC) - timedelta(seconds=n)
    return {"id": uuid.UUID(int=n), "agent": "triage", "status": status, "channel": "api", "created_by": "ops",
            "created_at": at, "updated_at": at, "attempt": 1, "losses": 0, "steps": 2, **wait}  # fmt: skip


def test_a_page_holds_the_limit_and_the_cursor_of_the_last_run_shown_when_more_follow() -> None:
    query = RunQuery(limit=2)
    assert run_list.params(query, None)["limit"] == 3  # one more, to know whether another page follows
    full = run_list.page([row(1), row(2), row(3)], query)
    assert [r["id"] for r in full.runs] == [str(uuid.UUID(int=1)), str(uuid.UUID(int=2))]
    assert full.next_cursor is not None
    assert decode_cursor(full.next_cursor) == Position(row(2)["created_at"], str(uuid.UUID(int=2)))
    after = run_list.params(RunQuery(limit=2, cursor=full.next_cursor), "ops")
    assert (after["after_at"], after["after_id"], after["scope"]) == (row(2)["created_at"], str(uuid.UUID(int=2)),
                                                                       "ops")  # fmt: skip
    assert run_list.page([row(1), row(2)], query).next_cursor is None
    assert run_list.page([], query) == run_list.RunPage([], None)


def test_a_summary_has_the_contracts_fields_and_waiting_for_only_while_waiting() -> None:
    shown = run_list.summary(row(1))
    assert set(shown) == {"id", "agent", "status", "channel", "created_by", "created_at", "updated_at", "attempt",
                          "losses", "steps", "held", "waiting_for"}  # fmt: skip
    assert shown["waiting_for"] is None
    approval = uuid.UUID(int=7)
    waiting = run_list.summary(row(1, "waiting", wait_kind="approval", wait_question="approve jira_add_comment?",
                                   wait_approval_id=approval, wait_tool="jira_add_comment"))  # fmt: skip
    assert waiting["waiting_for"] == {"kind": "approval", "approval_id": str(approval), "tool": "jira_add_comment",
                                      "question": "approve jira_add_comment?"}  # fmt: skip


def test_what_a_run_waits_for_is_shown_oldest_first_in_the_contracts_shapes() -> None:
    t = datetime(2025, 5, 1, tzinfo=UTC)
    later_input = Waiting("input", "Which env?", question_id=RUN, asked_at=t + timedelta(seconds=5), step=2, idx=0)
    approval = Waiting("approval", "approve jira_add_comment?", approval_id=RUN, tool="jira_add_comment",
                       asked_at=t, step=1, idx=1)  # fmt: skip
    same_step_input = Waiting("input", "Sure?", question_id=RUN, asked_at=t, step=1, idx=1)
    ordered = run_list.oldest_first([later_input, approval, same_step_input])
    assert ordered == [same_step_input, approval, later_input]  # by time, step, call, input before approval
    assert run_list.shown(later_input) == {"kind": "input", "question": "Which env?", "question_id": RUN}
    assert run_list.shown(approval) == {"kind": "approval", "approval_id": RUN, "tool": "jira_add_comment",
                                        "question": "approve jira_add_comment?"}  # fmt: skip
