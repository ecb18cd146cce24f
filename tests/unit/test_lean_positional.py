"""lean.positional: a named statement's `$n` form, as psycopg would send it."""

from __future__ import annotations

import pytest

from ticketiq.storage import lean
from ticketiq.storage.queries import QUERIES


def test_each_name_gets_one_number_in_order_of_first_use() -> None:
    found = lean.positional("UPDATE t SET a = %(a)s, b = %(b)s WHERE a = %(a)s AND c = %(c)s")
    assert found.text == b"UPDATE t SET a = $1, b = $2 WHERE a = $1 AND c = $3"
    assert found.params == ("a", "b", "c")


def test_a_doubled_percent_is_one_percent() -> None:
    found = lean.positional("SELECT 1 WHERE name LIKE 'job:%%' AND id = %(id)s")
    assert found.text == b"SELECT 1 WHERE name LIKE 'job:%' AND id = $1"
    assert found.params == ("id",)


@pytest.mark.parametrize("sql", ["SELECT %s", "SELECT %(a)d", "SELECT 1 %", "SELECT %b"])
def test_any_other_directive_is_refused(sql: str) -> None:
    with pytest.raises(ValueError, match="only %\\(name\\)s placeholders"):
        lean.positional(sql)


def test_every_named_statement_converts() -> None:
    for name, sql in QUERIES.items():
        found = lean.positional(sql)
        assert b"%(" not in found.text, name
        assert len(found.params) == len(set(found.params)), name
