"""A test's database made fresh again for the next test, instead of dropped and cloned anew.

A clone of the migrated template costs the server far more than the test that uses it: CREATE DATABASE
copies the template's files between two checkpoints, DROP removes them, and the first connections to a
new database build their catalog caches from nothing (some 0.4 s of server CPU a test, measured on a
2-core machine, where the suite is CPU-bound). A database a test is done with is judged instead:

- its schema is the template's (`fingerprint`: every relation, column, constraint, index, trigger,
  function, schema, extension, privilege and per-database setting): a test that changed any of them
  gives a database that is dropped, never reused;
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

_FINGERPRINT = """
SELECT md5(string_agg(part, E'\\n' ORDER BY part)) FROM (
  SELECT 'n ' || nspname || ' ' || coalesce(nspacl::text, '') AS part FROM pg_namespace
   WHERE nspname !~ '^pg_' AND nspname <> 'information_schema'
  UNION ALL
  SELECT 'c ' || c.oid::regclass::text || ' ' || c.relkind::text || ' ' || coalesce(c.relacl::text, '')
         || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 'a ' || a.attrelid::regclass::text || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
         || ' ' || a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
   WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema' AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'k ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace IN (SELECT oid FROM pg_namespace WHERE nspname !~ '^pg_'
                                               AND nspname <> 'information_schema')
  UNION ALL
  SELECT 'i ' || indexrelid::regclass::text || ' ' || pg_get_indexdef(indexrelid) FROM pg_index i
    JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 't ' || tgrelid::regclass::text || ' ' || tgname || ' ' || tgenabled::text || ' ' || pg_get_triggerdef(oid)
    FROM pg_trigger WHERE NOT tgisinternal
  UNION ALL
  SELECT 'f ' || p.oid::regprocedure::text || ' ' || md5(coalesce(p.prosrc, '')) || ' '
         || coalesce(p.proacl::text, '') || ' ' || coalesce(array_to_string(p.proconfig, ','), '')
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
   WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'
  UNION ALL
  SELECT 'e ' || extname || ' ' || extversion FROM pg_extension
  UNION ALL
  SELECT 's ' || coalesce(array_to_string(setconfig, ','), '') FROM pg_db_role_setting
   WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
  UNION ALL
  SELECT 'd ' || coalesce(datacl::text, '') FROM pg_database WHERE datname = current_database()
) parts
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


def fingerprint(conn: psycopg.Connection[tuple[object, ...]]) -> str:
    row = conn.execute(_FINGERPRINT).fetchone()
    assert row is not None
    return str(row[0])


def _holding_rows(conn: psycopg.Connection[tuple[object, ...]], tables: list[str]) -> list[str]:
    """The tables that hold a row, in one statement: an EXISTS per table, each stopping at its first row."""
    probes = sql.SQL(", ").join(sql.SQL("EXISTS (SELECT 1 FROM {})").format(sql.SQL(table)) for table in tables)
    row = conn.execute(sql.SQL("SELECT ARRAY[{}]").format(probes)).fetchone()
    assert row is not None
    found = cast(list[bool], row[0])
    return [table for table, held in zip(tables, found, strict=True) if held]


@dataclass(frozen=True)
class Seed:
    """What the template holds besides its schema: its tables, the rows some migrations wrote (as COPY
    text) and where each sequence stands."""

    fingerprint: str
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
            return cls(fingerprint(conn), tables, rows, sequences)

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
