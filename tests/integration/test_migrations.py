from __future__ import annotations

import asyncio

import psycopg
from psycopg.rows import dict_row

from tests.support.postgres import SuitePostgres
from ticketiq.storage.migrate import discover, migrate

EXPECTED_TABLES = {
    "runs",
    "checkpoints",
    "leases",
    "calls",
    "transcripts",
    "approvals",
    "audit_log",
    "quarantines",
    "channels",
    "principals",
    "grants",
    "tool_policies",
    "schema_migrations",
    "processes",
    "seal_probe",
    "api_tokens",
    "console_sessions",
    "answers",
    "inputs",
    "a2a_tasks",
    "idempotency_keys",
    "schedules",
    "schedule_fires",
    "triggers",
    "trigger_secrets",
    "trigger_deliveries",
    "ticket_events",
    "signed_requests",
    "teams_inbox",
    "knowledge",
    "jobs",
    "workflow_steps",
    "classifiers",
    "red_team_answers",
    "run_attempts",
}


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
        assert set(rows) == EXPECTED_TABLES
        # Every table of ours says what it is.
        assert all(rows[t] for t in EXPECTED_TABLES - {"schema_migrations"})
    finally:
        for c in conns:
            await c.close()
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
