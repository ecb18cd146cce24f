"""The stand-ins apply their schema at start only when the version applied is not theirs: a start on a
database that has it writes no catalog row (the suite's template notes every schema change, tests/support/
reuse.py WATCH), and one on a database whose schema is older applies it and names the new version."""

from __future__ import annotations

import psycopg

from tests.support import reuse
from ticketiq.standins.records import SCHEMA_VERSION, Store


def _comment(conn: psycopg.Connection[tuple[object, ...]]) -> object:
    row = conn.execute("SELECT obj_description('standin'::regnamespace, 'pg_namespace')").fetchone()
    assert row is not None
    return row[0]


async def test_a_start_on_the_current_schema_changes_nothing_and_an_older_one_is_brought_up(db_url: str) -> None:
    store = Store(db_url)
    await store.open()
    await store.close()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _comment(conn) == SCHEMA_VERSION
        assert reuse.changes(conn) == []  # its idempotent ALTERs and COMMENTs were not run again
        conn.execute("COMMENT ON SCHEMA standin IS 'ticketiq stand-ins older'")
        conn.execute("ALTER TABLE standin.writes DROP COLUMN client")
        conn.execute("TRUNCATE suite_watch.changes")
    store = Store(db_url)
    await store.open()
    await store.close()
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert _comment(conn) == SCHEMA_VERSION
        assert "ALTER TABLE" in reuse.changes(conn)  # applied: the column is back
        found = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = 'standin' "
                             "AND table_name = 'writes' AND column_name = 'client'").fetchall()  # fmt: skip
        assert found == [(1,)]
