"""Migration 019 on a database that took ticket events before it: each body taken keeps its claim, bound
to the identifier it first came with, so a replay of an old body is still found (I19)."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from tests.support.postgres import SuitePostgres
from ticketiq.storage.migrate import FOLDER, migrate

BODY_A, BODY_B = "a" * 64, "b" * 64


async def test_migration_019_claims_each_body_taken_before_it_for_its_first_identifier(
    pg: SuitePostgres, tmp_path: Path
) -> None:
    url = pg.url("postgres")
    name = "tq_migrate_019"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {name}")
    before, through = tmp_path / "before", tmp_path / "through"
    for folder, last in ((before, 18), (through, 19)):
        folder.mkdir()
        for path in sorted(FOLDER.glob("*.sql")):
            if int(path.name[:3]) <= last:
                shutil.copy(path, folder / path.name)
    try:
        async with await psycopg.AsyncConnection.connect(pg.url(name), autocommit=True, row_factory=dict_row) as conn:
            assert (await migrate(conn, before))[-1] == 18
            # Body A taken as ev-2 and, a little earlier, as ev-1 (two copies that raced before 019 could
            # both be recorded); body B taken as ev-3 for two agents.
            events = [("ev-2", "triage", BODY_A, "50 seconds"), ("ev-1", "triage", BODY_A, "1 minute"),
                      ("ev-3", "triage", BODY_B, "30 seconds"), ("ev-3", "watch", BODY_B, "29 seconds")]  # fmt: skip
            for event_id, agent, digest, ago in events:
                run_id = uuid.uuid4()
                await conn.execute(
                    "INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id) "
                    "VALUES (%s, %s, 'x', 'o', 't', 'ticket_event', false, %s)",
                    (run_id, agent, str(run_id)),
                )
                await conn.execute(
                    "INSERT INTO ticket_events (event_id, agent, run_id, webhook_event, issue_key, body_sha256, "
                    "received_at) VALUES (%s, %s, %s, 'jira:issue_created', 'OPS-1', %s, now() - %s::interval)",
                    (event_id, agent, run_id, digest, ago),
                )
            assert await migrate(conn, through) == [19]
            cur = await conn.execute("SELECT source, digest, delivery_id, kept_until FROM signed_requests ORDER BY 2")
            assert await cur.fetchall() == [
                {"source": "jira", "digest": BODY_A, "delivery_id": "ev-1", "kept_until": None},
                {"source": "jira", "digest": BODY_B, "delivery_id": "ev-3", "kept_until": None},
            ]
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
