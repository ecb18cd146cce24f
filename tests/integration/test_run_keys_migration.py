"""Migration 020 (issue 15, I19) over rows made before it: every run key moves into its maker's namespace
(engine/run_keys.py), so a repeat of a request made before the upgrade still finds its run, and a run a
caller made through the API under an internal key (a squat) moves into the API namespace, freeing it.

The database is migrated to 019, given rows as the code before 020 wrote them, then migrated to the end.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from tests.support.postgres import SuitePostgres
from ticketiq.engine import run_keys
from ticketiq.engine.step_keys import workflow_step_key
from ticketiq.storage.migrate import FOLDER, discover, migrate

FIRE_AT = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
BEFORE = 20


@pytest.fixture
async def conn(pg: SuitePostgres, tmp_path: Path) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """An empty database migrated up to the one before 020."""
    name = f"tq_run_keys_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg.url("postgres"), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    older = tmp_path / "migrations"
    older.mkdir()
    for path in sorted(FOLDER.glob("*.sql")):
        if int(path.name[:3]) < BEFORE:
            shutil.copy(path, older / path.name)
    connection = await psycopg.AsyncConnection.connect(pg.url(name), autocommit=True, row_factory=dict_row)
    try:
        assert await migrate(connection, older) == list(range(1, BEFORE))
        yield connection
    finally:
        await connection.close()
        with psycopg.connect(pg.url("postgres"), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def run(conn: psycopg.AsyncConnection[Any], channel: str, key: str | None, created_by: str | None) -> str:
    run_id = str(uuid.uuid4())
    await conn.execute(
        "INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, idempotency_key, "
        "created_by) VALUES (%s, 'helper', 'x', 'o', 't', %s, false, %s, %s, %s)",
        (run_id, channel, run_id, key, created_by),
    )
    return run_id


async def test_every_run_key_moves_into_its_namespace_and_a_squatted_fire_is_failed(
    conn: psycopg.AsyncConnection[Any],
) -> None:
    when = FIRE_AT.isoformat()
    squatted, own = str(uuid.uuid4()), str(uuid.uuid4())
    for schedule in (squatted, own):
        await conn.execute(
            "INSERT INTO schedules (id, agent, cron, timezone, input, next_fire_at) "
            "VALUES (%s, 'helper', '0 12 * * *', 'UTC', 'x', now())",
            (schedule,),
        )
    step_key = workflow_step_key(str(uuid.uuid4()), "summarise", 0)
    before = {
        "api": await run(conn, "api", "k-1", "ana"),
        "squatter": await run(conn, "api", f"cron:{squatted}:{when}", "mallory"),
        "before_tokens": await run(conn, "api", "k-old", None),
        "copilot": await run(conn, "copilot", "copilot:ana:k:2", "ana"),
        "a2a": await run(conn, "a2a", "a2a:ana:message:1", "ana"),
        "cron": await run(conn, "cron", f"cron:{own}:{when}", "ops"),
        "workflow": await run(conn, "workflow", step_key, "ana"),
        "webhook": await run(conn, "webhook", "webhook\tdeploys\td-1", "webhook:deploys"),
        "ticket_event": await run(conn, "ticket_event", "ticket_event\tev-1\ttriager", "jira:webhook"),
        "teams": await run(conn, "teams", "teams§" + "0" * 48, "teams:aad-ana"),
        "unkeyed": await run(conn, "api", None, "ana"),
    }
    # Before 020 the squatted fire found the squatter's run under its key and linked it.
    for schedule, run_id in ((squatted, before["squatter"]), (own, before["cron"])):
        await conn.execute(
            "INSERT INTO schedule_fires (schedule_id, fire_at, run_key, run_id, fired_by) VALUES (%s, %s, %s, %s, 'l')",
            (schedule, FIRE_AT, f"cron:{schedule}:{when}", run_id),
        )

    assert await migrate(conn) == [m.version for m in discover()][BEFORE - 1 :]

    rows = await (await conn.execute("SELECT id::text, idempotency_key FROM runs")).fetchall()
    keys = {r["id"]: r["idempotency_key"] for r in rows}
    assert {name: keys[run_id] for name, run_id in before.items()} == {
        "api": run_keys.api("ana", "k-1"),
        "squatter": run_keys.api("mallory", f"cron:{squatted}:{when}"),
        "before_tokens": "api\t\tk-old",  # no token's: no token has an empty name
        "copilot": run_keys.copilot("ana", "k:2"),
        "a2a": run_keys.a2a("ana", "message:1"),
        "cron": run_keys.cron(own, FIRE_AT),
        "workflow": run_keys.workflow_step(step_key),
        "webhook": "webhook\tdeploys\td-1",
        "ticket_event": "ticket_event\tev-1\ttriager",
        "teams": "teams§" + "0" * 48,
        "unkeyed": None,
    }
    fires = await (await conn.execute(
        "SELECT schedule_id::text AS schedule, run_key, run_id::text AS run_id, reason FROM schedule_fires"
    )).fetchall()  # fmt: skip
    by_schedule = {f["schedule"]: f for f in fires}
    assert by_schedule[own] == {"schedule": own, "run_key": run_keys.cron(own, FIRE_AT), "run_id": before["cron"],
                                "reason": None}  # fmt: skip
    failed = by_schedule[squatted]
    assert (failed["run_key"], failed["run_id"]) == (run_keys.cron(squatted, FIRE_AT), None)
    assert before["squatter"] in failed["reason"] and "mallory" in failed["reason"]


async def test_an_inspector_write_is_started_once_per_key(conn: psycopg.AsyncConnection[Any]) -> None:
    await migrate(conn)
    started = "INSERT INTO audit_log (action, actor, detail) VALUES ('inspector.call.started', 'ops', %s)"
    await conn.execute(started, (psycopg.types.json.Jsonb({"key": "ti-1"}),))
    await conn.execute(started, (psycopg.types.json.Jsonb({"key": "ti-2"}),))
    with pytest.raises(psycopg.errors.UniqueViolation):
        await conn.execute(started, (psycopg.types.json.Jsonb({"key": "ti-1"}),))
