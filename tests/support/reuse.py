"""A test's database made fresh again for the next test, instead of dropped and cloned anew.

A clone of the migrated template costs the server far more than the test that uses it: CREATE DATABASE
copies the template's files between two checkpoints, DROP removes them, and the first connections to a
new database build their catalog caches from nothing (some 0.4 s of server CPU a test, measured on a
2-core machine, where the suite is CPU-bound). A database a test is done with is judged instead:

- its schema is the template's: every schema change is noted as it is made, by an event trigger the
  template holds (`WATCH`: each DDL command that changed something, each object dropped), and the
  database's own settings and privileges, which no event trigger sees, are compared with the template's;
  a test that changed any of them gives a database that is dropped, never reused (reading the whole
  catalog instead cost the server some 35 ms a test);
- its rows are made the template's again (`Seed.restore`): every table that holds a row is truncated,
  the rows the migrations left are copied back, and every sequence is set where the template has it;
- the statements it ran are forgotten (pg_stat_statements, kept per database);
- it is renamed, so a process of the last test that somehow still knew its name finds nothing.

Anything that fails on the way (the server was killed, a session would not end) drops it instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import psycopg
from psycopg import sql

# The schemas whose rows a test writes: the app's and the stand-ins'.
SCHEMAS = ("public", "standin")
# A session a test left must end before the tables can be truncated under it.
ENDED_WITHIN_S = 5.0

# Schema changes noted as they are made (see the module docstring). ENABLE ALWAYS: the seed is restored in
# replica mode, where a plain event trigger does not fire. A command that changed nothing (CREATE TABLE IF
# NOT EXISTS of a table that is there, as the migrations and the stand-ins run at every start) is no change.
WATCH = """
CREATE SCHEMA suite_watch;
CREATE TABLE suite_watch.changes (tag text NOT NULL, event text NOT NULL);
CREATE FUNCTION suite_watch.note() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_EVENT = 'sql_drop' THEN
    INSERT INTO suite_watch.changes VALUES (TG_TAG, TG_EVENT);
  ELSIF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands()) THEN
    INSERT INTO suite_watch.changes VALUES (TG_TAG, TG_EVENT);
  END IF;
END $$;
CREATE EVENT TRIGGER suite_watch_ddl ON ddl_command_end EXECUTE FUNCTION suite_watch.note();
CREATE EVENT TRIGGER suite_watch_drop ON sql_drop EXECUTE FUNCTION suite_watch.note();
ALTER EVENT TRIGGER suite_watch_ddl ENABLE ALWAYS;
ALTER EVENT TRIGGER suite_watch_drop ENABLE ALWAYS;
"""

# What no event trigger sees: the database's own settings (ALTER DATABASE .. SET) and privileges.
_DATABASE_LEVEL = """
SELECT coalesce((SELECT string_agg(array_to_string(setconfig, ','), ';' ORDER BY setrole) FROM pg_db_role_setting
                  WHERE setdatabase = d.oid), '') || ' ' || coalesce(d.datacl::text, '')
  FROM pg_database d WHERE d.datname = current_database()
"""

_TABLES = """
SELECT format('%%I.%%I', schemaname, tablename) AS name FROM pg_tables
 WHERE schemaname = ANY(%s) ORDER BY 1
"""

# Where each sequence stands: its last value, or its start when none was taken yet.
_SEQUENCES = """
SELECT format('%%I.%%I', schemaname, sequencename) AS name, coalesce(last_value, start_value) AS value,
       last_value IS NOT NULL AS called
  FROM pg_sequences WHERE schemaname = ANY(%s) ORDER BY 1
"""


def database_level(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute(_DATABASE_LEVEL).fetchone()
    assert row is not None
    return str(row[0])


def changes(conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    """The schema changes noted on this database, as their command tags."""
    return [str(row[0]) for row in conn.execute("SELECT tag FROM suite_watch.changes")]


def _holding_rows(conn: psycopg.Connection[tuple[object, ...]], tables: list[str]) -> list[str]:
    """The tables that hold a row, in one statement: an EXISTS per table, each stopping at its first row."""
    probes = sql.SQL(", ").join(sql.SQL("EXISTS (SELECT 1 FROM {})").format(sql.SQL(table)) for table in tables)
    row = conn.execute(sql.SQL("SELECT ARRAY[{}]").format(probes)).fetchone()
    assert row is not None
    found = cast(list[bool], row[0])
    return [table for table, held in zip(tables, found, strict=True) if held]


@dataclass(frozen=True)
class Seed:
    """What the template holds besides its schema: its database-level settings and privileges, its tables,
    the rows some migrations wrote (as COPY text) and where each sequence stands."""

    database_level: str
    tables: list[str]
    rows: dict[str, bytes]
    sequences: list[tuple[str, int, bool]]

    @classmethod
    def of(cls, url: str) -> Seed:
        with psycopg.connect(url, autocommit=True) as conn:
            tables = [str(r[0]) for r in conn.execute(_TABLES, (list(SCHEMAS),)).fetchall()]
            rows: dict[str, bytes] = {}
            for table in _holding_rows(conn, tables):
                with conn.cursor().copy(sql.SQL("COPY {} TO STDOUT").format(sql.SQL(table))) as copy:
                    rows[table] = b"".join(bytes(chunk) for chunk in copy)
            sequences = [(str(n), int(v), bool(c)) for n, v, c in conn.execute(_SEQUENCES, (list(SCHEMAS),))]
            return cls(database_level(conn), tables, rows, sequences)

    def changed_by(self, conn: psycopg.Connection[tuple[object, ...]]) -> list[str]:
        """How the test changed the schema of this database: the commands noted, and its own settings or
        privileges when they are not the template's; [] when it did not."""
        noted = changes(conn)
        if database_level(conn) != self.database_level:
            noted.append("ALTER DATABASE")
        return noted

    def restore(self, conn: psycopg.Connection[tuple[object, ...]]) -> None:
        """The template's rows again, in one transaction: every table holding a row emptied (the seeded ones
        always hold theirs), the seed rows copied back, every sequence set back. Replica mode: no trigger
        fires (no NOTIFY, no audit) and no foreign key is checked while the seed rows go back in."""
        held = _holding_rows(conn, self.tables)
        with conn.transaction():
            conn.execute("SET LOCAL session_replication_role = replica")
            if held:
                conn.execute(sql.SQL("TRUNCATE {} CASCADE").format(sql.SQL(", ").join(sql.SQL(t) for t in held)))
            for table, text in self.rows.items():
                with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(sql.SQL(table))) as copy:
                    copy.write(text)
            if self.sequences:
                setvals = sql.SQL(", ").join(
                    sql.SQL("setval({}::regclass, {}, {})").format(sql.Literal(n), sql.Literal(v), sql.Literal(c))
                    for n, v, c in self.sequences
                )
                conn.execute(sql.SQL("SELECT {}").format(setvals))
        conn.execute("SELECT pg_stat_statements_reset(0, (SELECT oid FROM pg_database "
                     "WHERE datname = current_database()), 0)")  # fmt: skip


def end_sessions(admin: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    """End every session on the database and wait until they are gone (a terminated backend takes a moment
    to exit, and holds its locks until then)."""
    deadline = time.monotonic() + ENDED_WITHIN_S
    while True:
        left = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
        if left == (0,):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"sessions on {name} did not end within {ENDED_WITHIN_S} s")
        time.sleep(0.01)
