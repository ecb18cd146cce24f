"""The source sync's pure parts: its params, the query, a search page read, the rows it makes and the
cursor the job's state holds."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.errors import RequestError
from ticketiq.jobs.jira_source import PageMalformed, SearchPage, SyncCursor, adf_text, jql_for, knowledge_rows
from ticketiq.jobs.source_sync import KIND, check


def issue(key: str, **fields: Any) -> dict[str, Any]:
    return {"id": "1", "key": key, "self": "x", "fields": fields}


def adf(*paragraphs: str) -> dict[str, Any]:
    return {
        "type": "doc",
        "version": 1,
        "content": [{"type": "paragraph", "content": [{"type": "text", "text": p}]} for p in paragraphs],
    }


def test_the_kind_is_a_resumable_sync_counting_issues() -> None:
    assert (KIND.name, KIND.resumable, KIND.unit, KIND.internal) == ("source_sync", True, "issues", False)


def test_params_default_the_source_and_page_size() -> None:
    assert check({"project": "OPS"}) == {"source": "jira", "project": "OPS", "page_size": 50}
    assert check({"project": "OPS_2", "page_size": 100, "source": "jira"})["page_size"] == 100


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "body.params.project"),
        ({"project": "ops"}, "body.params.project"),
        ({"project": "O"}, "body.params.project"),
        ({"project": "OPS-1"}, "body.params.project"),
        ({"project": 7}, "body.params.project"),
        ({"project": "ABCDEFGHIJK"}, "body.params.project"),
        ({"project": "OPS", "page_size": 0}, "body.params.page_size"),
        ({"project": "OPS", "page_size": 101}, "body.params.page_size"),
        ({"project": "OPS", "page_size": True}, "body.params.page_size"),
        ({"project": "OPS", "page_size": "50"}, "body.params.page_size"),
        ({"project": "OPS", "source": "github"}, "body.params.source"),
        ({"project": "OPS", "limit": 3}, "body.params.limit"),
    ],
)
def test_bad_params_are_refused_naming_the_field(params: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as refused:
        check(params)
    assert refused.value.field == field
    assert refused.value.status == 422


def test_the_query_is_the_whole_project_in_key_order() -> None:
    assert jql_for("OPS") == 'project = "OPS" ORDER BY key ASC'


def test_a_page_without_a_token_is_the_last_whatever_is_last_says() -> None:
    assert SearchPage.parse({"issues": [], "isLast": True}).last
    assert SearchPage.parse({"issues": []}).last  # Jira omits the token on its last page
    assert SearchPage.parse({"issues": [], "nextPageToken": "t", "isLast": True}).last
    middle = SearchPage.parse({"issues": [issue("OPS-1")], "nextPageToken": "t2", "isLast": False})
    assert (middle.last, middle.next_page_token) == (False, "t2")


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"issues": "none"},
        {"issues": [{"id": "1"}]},
        {"issues": [{"key": ""}]},
        {"issues": [{"key": "OPS-1", "fields": []}]},
        {"issues": [], "nextPageToken": 5},
        {"issues": [], "nextPageToken": ""},
    ],
)
def test_a_page_in_another_shape_is_refused_before_anything_is_written(body: Any) -> None:
    with pytest.raises(PageMalformed):
        SearchPage.parse(body)


def test_rows_carry_the_text_labels_status_and_time_and_each_key_once() -> None:
    page = SearchPage.parse(
        {
            "issues": [
                issue(
                    "OPS-1",
                    summary="DNS lookups time out",
                    description=adf("First line.", "Second line."),
                    labels=["network", 3],
                    status={"name": "In Progress"},
                    updated="2024-01-01T09:17:00.000+0000",
                ),
                issue("OPS-2"),
                issue("OPS-2", summary="the later copy wins"),
            ]
        }
    )
    rows = knowledge_rows(page)
    assert rows[0] == {
        "key": "OPS-1",
        "title": "DNS lookups time out",
        "body": "First line.\nSecond line.",
        "labels": ["network"],
        "status": "In Progress",
        "updated_at": "2024-01-01T09:17:00+00:00",
    }
    assert [r["key"] for r in rows] == ["OPS-1", "OPS-2"]
    assert rows[1]["title"] == "the later copy wins"
    assert (rows[1]["body"], rows[1]["labels"], rows[1]["status"], rows[1]["updated_at"]) == ("", [], None, None)


def test_text_postgres_cannot_store_is_made_storable() -> None:
    page = SearchPage.parse({"issues": [issue("BIN-1", summary="a\x00b", description=adf("log \ud83d end"))]})
    row = knowledge_rows(page)[0]
    assert row["title"] == "a\ufffdb"
    assert row["body"] == "log \ufffd end"


def test_adf_text_reads_nested_blocks_a_line_each_and_plain_text_as_it_is() -> None:
    def text(value: str) -> dict[str, Any]:
        return {"type": "text", "text": value}

    def item(value: str) -> dict[str, Any]:
        return {"type": "listItem", "content": [{"type": "paragraph", "content": [text(value)]}]}

    doc = {
        "type": "doc",
        "content": [
            {"type": "heading", "content": [text("Title")]},
            {"type": "bulletList", "content": [item("a"), item("b")]},
            {"type": "paragraph", "content": [text("x"), {"type": "hardBreak"}, text("y")]},
        ],
    }
    assert adf_text(doc) == "Title\na\nb\nx\ny"
    assert adf_text("plain") == "plain"
    assert adf_text(None) == ""


def test_the_cursor_moves_with_each_page_and_round_trips_through_the_state() -> None:
    first = SyncCursor(total=120)
    assert not first.started
    page = SearchPage.parse({"issues": [issue(f"OPS-{n}") for n in range(1, 51)], "nextPageToken": "p2"})
    second = first.after(page, 50)
    assert (second.pages, second.issues, second.next_page_token, second.finished) == (1, 50, "p2", False)
    assert SyncCursor.of(second.state()) == second
    assert SyncCursor.of({}) == SyncCursor()
    last = second.after(SearchPage.parse({"issues": [issue("OPS-51")]}), 1)
    assert (last.finished, last.next_page_token, last.pages) == (True, None, 2)


def test_a_token_asking_for_the_same_page_again_is_refused() -> None:
    cursor = SyncCursor(next_page_token="p2", pages=1, issues=50)
    with pytest.raises(PageMalformed):
        cursor.after(SearchPage.parse({"issues": [], "nextPageToken": "p2"}), 0)


def test_progress_uses_the_estimate_while_it_holds_and_the_count_once_finished() -> None:
    assert SyncCursor(issues=50, pages=1).progress() == (50, None)
    assert SyncCursor(issues=50, pages=1, total=120).progress() == (50, 120)
    assert SyncCursor(issues=130, pages=3, total=120).progress() == (130, 130)  # an estimate below done
    assert SyncCursor(issues=118, pages=3, total=120, finished=True).progress() == (118, 118)


@given(st.lists(st.integers(min_value=0, max_value=100), min_size=1, max_size=30), st.integers(0, 10_000))
def test_done_never_exceeds_total_and_counts_every_written_issue(sizes: list[int], estimate: int) -> None:
    cursor = SyncCursor(total=estimate)
    for number, size in enumerate(sizes):
        token = None if number == len(sizes) - 1 else f"p{number + 2}"
        page = SearchPage.parse({"issues": [issue(f"OPS-{i}") for i in range(size)], "nextPageToken": token})
        cursor = cursor.after(page, size)
        done, total = cursor.progress()
        assert total is not None and done <= total
    assert cursor.finished and cursor.issues == sum(sizes) and cursor.pages == len(sizes)
