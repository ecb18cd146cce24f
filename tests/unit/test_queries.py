from __future__ import annotations

import pytest

from ticketiq.storage.queries import QUERIES, parse


def test_named_blocks_are_split_by_name_and_area() -> None:
    text = "-- name: a\nSELECT 1;\n\n-- name: b\n-- a comment\nSELECT 2\n"
    assert parse(text, "x") == {"x.a": "SELECT 1", "x.b": "-- a comment\nSELECT 2"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x")


def test_every_run_statement_that_writes_is_fenced_by_the_attempt() -> None:
    # I3: statements a process makes about a running run carry the attempt.
    for name in (
        "runs.write_checkpoint",
        "runs.end",
        "calls.mark_in_doubt",
        "calls.record_outcome",
        "approvals.file",
    ):
        assert "attempt = %(attempt)s" in QUERIES[name], name
