"""A database a test gives back is used again only once it is the template's again (tests/support/reuse.py):
the rows, sequences and statement counts a test left are gone, its old name leads nowhere, and a test
that changed the schema gives back a database that is dropped instead."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.postgres import SuitePostgres
from tests.support.reuse import SCHEMAS


def state(url: str) -> dict[str, Any]:
    """Every table's rows (as text, in order), every sequence's position, and the statements counted."""
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        tables = [r["name"] for r in conn.execute(
            "SELECT format('%%I.%%I', schemaname, tablename) AS name FROM pg_tables "
            "WHERE schemaname = ANY(%s) ORDER BY 1", (list(SCHEMAS),))]  # fmt: skip
        rows = {t: [str(r) for r in conn.execute(f"SELECT t::text AS r FROM {t} t ORDER BY 1")] for t in tables}
        sequences = conn.execute("SELECT sequencename, last_value FROM pg_sequences ORDER BY 1").fetchall()
        counted = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_statements "
            "WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query !~* 'pg_stat_statements'"
        ).fetchone()
    return {"rows": rows, "sequences": sequences, "counted": counted}


def names(pg: SuitePostgres) -> set[str]:
    with psycopg.connect(pg.admin_url, autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database")}


def test_a_database_given_back_is_the_templates_again_under_a_new_name(pg: SuitePostgres) -> None:
    url = pg.fresh_database()
    template = state(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO api_tokens (name, role, token_hash) VALUES ('left-behind', 'admin', %s)", ("0" * 64,))
        conn.execute("INSERT INTO standin.writes (vendor, operation, target, key, effect, status, body) "
                     "VALUES ('jira', 'comment', 'OPS-1', 'k', 'applied', 201, '{}')")  # fmt: skip
        conn.execute("DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)")
        for sequence in conn.execute("SELECT format('%I.%I', schemaname, sequencename) FROM pg_sequences"):
            conn.execute("SELECT nextval(%s::regclass)", (sequence[0],))
        conn.execute("LISTEN left_behind")  # a session the test never closed
        name = url.rsplit("/", 1)[1]
        assert state(url) != template
        with psycopg.connect(pg.admin_url, autocommit=True) as admin:
            fresh = pg.made_fresh(name, admin)
    assert fresh is not None and fresh != name
    assert name not in names(pg)
    again = state(pg.url(fresh))
    assert again["rows"] == template["rows"]
    assert again["sequences"] == template["sequences"]
    assert again["counted"] == template["counted"]  # its own reads alone: what the last test ran is gone
    pg.drop(pg.url(fresh))


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE runs ADD COLUMN extra text",
        "CREATE TABLE public.annex (id int)",
        "CREATE INDEX runs_extra ON runs (created_at, id)",
        "ALTER TABLE runs DISABLE TRIGGER ALL",
        "CREATE OR REPLACE FUNCTION public.annex() RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "REVOKE ALL ON runs FROM PUBLIC; GRANT SELECT ON runs TO PUBLIC",
        "ALTER DATABASE {name} SET statement_timeout = '1s'",
    ],
)
def test_a_database_whose_schema_a_test_changed_is_dropped(pg: SuitePostgres, change: str) -> None:
    url = pg.fresh_database()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in change.format(name=name).split("; "):
            conn.execute(statement)
    with psycopg.connect(pg.admin_url, autocommit=True) as admin:
        assert pg.made_fresh(name, admin) is None
    assert name not in names(pg)
