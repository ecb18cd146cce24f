from __future__ import annotations

import asyncio
import re

import psycopg
from psycopg.rows import dict_row

from tests.support.postgres import SuitePostgres
from ticketiq.dbserver import declared_schema as schema
from ticketiq.storage.migrate import discover, migrate


def _declared_tables() -> set[str]:
    """The tables schema.sql declares (test_schema.py holds the file to what the migrations build)."""
    return set(re.findall(r"^-- TABLE public\.(\w+)$", schema.SCHEMA_FILE.read_text(), re.MULTILINE))


async def test_two_processes_migrating_together_apply_each_migration_once(pg: SuitePostgres) -> None:
    url = pg.url("postgres")
    name = "tq_migrate_race"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    target = pg.url(name)
    conns = [await psycopg.AsyncConnection.connect(target, autocommit=True, row_factory=dict_row) for _ in range(2)]
    try:
        applied = await asyncio.gather(*(migrate(c) for c in conns))
        versions = [m.version for m in discover()]
        # Exactly one of the two applied everything; the other found nothing left to do.
        assert sorted(applied, key=len) == [[], versions]
        cur = await conns[0].execute(
            "SELECT c.relname, obj_description(c.oid) AS comment FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r'"
        )
        rows = {r["relname"]: r["comment"] for r in await cur.fetchall()}
        # The race left the whole schema, not a part of it.
        assert set(rows) == _declared_tables()
        # Every table of ours says what it is.
        assert {t for t, comment in rows.items() if not comment} <= {"schema_migrations"}
    finally:
        for c in conns:
            await c.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
