"""The Jira stand-in's search, its pure parts: the JQL it understands, its page tokens, the fields and
page sizes it answers with, and its generated issues."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ticketiq.standins.vendors.jira_corpus import LABELS, TOPICS, generated_issue
from ticketiq.standins.vendors.jira_search import (
    BAD_TOKEN,
    UNBOUNDED,
    Jql,
    PageToken,
    SearchRefused,
    chosen_fields,
    page_size,
    parse_jql,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("project = OPS", Jql("OPS")),
        ('project = "OPS" ORDER BY key ASC', Jql("OPS")),
        ("PROJECT='ops' order by issuekey desc", Jql("OPS", descending=True)),
        ("  project=AB_1   ORDER   BY created  ", Jql("AB_1")),
        ("project = OPS ORDER BY id DESC", Jql("OPS", descending=True)),
    ],
)
def test_the_project_clause_and_an_order_are_understood(text: str, expected: Jql) -> None:
    assert parse_jql(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", UNBOUNDED),
        ("ORDER BY key ASC", UNBOUNDED),
        ("assignee = me", "Error in the JQL Query"),
        ("project = OPS AND status = Done", "Error in the JQL Query"),
        ("project = OPS ORDER BY summary", "cannot order by"),
        ("project = 1OPS", "does not exist"),
    ],
)
def test_other_queries_are_refused_in_jiras_words(text: str, words: str) -> None:
    with pytest.raises(SearchRefused, match=words):
        parse_jql(text)


@given(st.integers(min_value=0, max_value=10**12))
def test_a_token_round_trips_for_its_own_query_only(after: int) -> None:
    ops, abc = Jql("OPS"), Jql("ABC")
    token = PageToken(after, ops.fingerprint()).encode()
    assert PageToken.decode(token, ops).after == after
    with pytest.raises(SearchRefused, match="invalid or expired"):
        PageToken.decode(token, abc)
    with pytest.raises(SearchRefused, match="invalid or expired"):
        PageToken.decode(token, Jql("OPS", descending=True))


@pytest.mark.parametrize("forged", ["", "not-a-token", "e30", "eyJhIjotMSwicSI6IngifQ", "!!!"])
def test_a_forged_token_is_refused(forged: str) -> None:
    with pytest.raises(SearchRefused, match=BAD_TOKEN):
        PageToken.decode(forged, Jql("OPS"))


def test_fields_default_to_none_and_take_names_all_and_exclusions() -> None:
    assert chosen_fields([]) == ()
    assert chosen_fields(["summary,labels", "status"]) == ("summary", "labels", "status")
    assert "description" in chosen_fields(["*all"])
    assert "description" not in chosen_fields(["*navigable", "-description"])
    assert chosen_fields(["nosuchfield"]) == ()


def test_page_size_defaults_to_50_and_caps_by_what_is_asked() -> None:
    assert page_size(None, ()) == 50
    assert page_size("7000", ()) == 5000
    assert page_size(7000, ("summary",)) == 100
    assert page_size("0", ()) == 1
    for bad in ("many", -1, True):
        with pytest.raises(SearchRefused):
            page_size(bad, ())


def test_generated_issues_are_the_same_every_time_and_labelled_by_the_words_they_use() -> None:
    first = [generated_issue("OPS", n) for n in range(1, 401)]
    assert first == [generated_issue("OPS", n) for n in range(1, 401)]
    assert generated_issue("OPS", 1) != generated_issue("ABC", 1)
    assert len({i.summary + i.description for i in first}) > 350  # details differ from issue to issue
    seen = {label for i in first for label in i.labels}
    assert seen == set(LABELS) == {"network", "database", "auth", "billing"}
    for generated in first:
        (topic,) = generated.labels
        templates = TOPICS[topic][0]
        # The summary comes from its own topic's templates: what a classifier learns the label from.
        assert any(re.fullmatch(re.sub(r"\\\{\w+\\\}", ".+", re.escape(t)), generated.summary) for t in templates)
        assert generated.key.startswith("OPS-")
    assert first[1].created_at > first[0].created_at
