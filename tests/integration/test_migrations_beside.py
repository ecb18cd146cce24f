"""Expand, then contract (storage/migrate.py): each migration declares whether the previous release runs
beside it, and one that it cannot is refused while a live process of another release is registered; the
same migration goes through once only this release's processes are live. `ticketiq db migrate --check`
reads the same."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg.rows import dict_row

from ticketiq.leader.liveness import Liveness
from ticketiq.runtime import release
from ticketiq.storage import migrate as migrations
from ticketiq.storage.database import Database

NARROW = "-- beside: none: drops what the previous release reads\nCREATE TABLE narrow_probe (id int);\n"


def test_every_migration_declares_whether_the_previous_release_runs_beside_it() -> None:
    found = migrations.discover()
    assert {m.version for m in found if not m.beside} == {3, 12}
    assert all(m.why for m in found if not m.beside)
    with pytest.raises(ValueError, match="must begin with `-- beside: previous`"):
        migrations.declared("031_x.sql", "CREATE TABLE x (id int);\n")
    assert migrations.declared("031_x.sql", "-- beside: none: it drops y\n") == (False, "it drops y")


def test_the_refusal_names_the_migration_and_the_processes_and_needs_both() -> None:
    pending = [migrations.Migration(31, "narrow", NARROW, False, "it drops y"), migrations.Migration(32, "add", "")]
    old = [migrations.LiveProcess("vm:1:a", "0.0.9", "abc"), migrations.LiveProcess("vm:2:b", None, None)]
    said = migrations.refusal(pending, old)
    assert said is not None and "031_narrow (it drops y)" in said and "032_add" not in said
    assert "vm:1:a (0.0.9 abc)" in said and "vm:2:b (a release before migration 030)" in said
    assert migrations.refusal(pending, []) is None
    assert migrations.refusal(pending[1:], old) is None


async def applied(db_url: str) -> set[int]:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        rows = await (await conn.execute("SELECT version FROM schema_migrations")).fetchall()
        return {int(r["version"]) for r in rows}


async def test_a_migration_the_previous_release_cannot_run_beside_waits_until_only_this_release_is_live(
    db: Database, db_url: str, tmp_path: Path
) -> None:
    folder = tmp_path / "migrations"
    shutil.copytree(migrations.FOLDER, folder)
    (folder / f"{len(migrations.discover()) + 1:03d}_narrow.sql").write_text(NARROW)
    ours = Liveness(db.url, 1.0, on_lost=lambda why: None)
    theirs = Liveness(db.url, 1.0, on_lost=lambda why: None)
    await ours.register("vm:ours")
    await theirs.register("vm:theirs")
    try:
        async with db.pool.connection() as conn:
            await conn.execute("UPDATE processes SET version = '0.0.9', build_commit = 'old' WHERE id = 'vm:theirs'")
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
            pending, others = await migrations.check(conn, folder)
            assert [m.label for m in migrations.blockers(pending)] == [pending[-1].label]
            assert [(p.id, p.version, p.commit) for p in others] == [("vm:theirs", "0.0.9", "old")]
            before = await applied(db_url)
            with pytest.raises(migrations.MigrationRefused, match=r"_narrow \(drops what the previous release reads\)"):
                await migrations.migrate(conn, folder)
            assert await applied(db_url) == before  # nothing applied, the refused one included
            assert (await (await conn.execute("SELECT to_regclass('narrow_probe') AS t")).fetchone() or {})["t"] is None
            # The old process stops: only this release's process is live, and the migration goes through once.
            await theirs.stop(db)
            assert await migrations.migrate(conn, folder) == [pending[-1].version]
            assert await migrations.migrate(conn, folder) == []
            running = release.current()
            async with db.pool.connection() as pooled:
                row = await (await pooled.execute(
                    "SELECT version, build_commit FROM processes WHERE id = 'vm:ours'")).fetchone()  # fmt: skip
            assert row is not None and tuple(row.values()) == (running.version, running.commit)
    finally:
        await ours.stop(db)
        await theirs.stop(db)


def test_db_migrate_check_names_a_pending_migration_the_previous_release_cannot_run_beside(
    db_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    env.update({"TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp_path / "home")})
    cli = [sys.executable, "-m", "ticketiq.cli", "db", "migrate", "--check"]
    clean = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert (clean.returncode, clean.stdout.strip()) == (0, "nothing pending"), clean.stderr
    with psycopg.connect(db_url, autocommit=True) as conn:  # as if 012 were the release's new migration
        conn.execute("DELETE FROM schema_migrations WHERE version = 12")
    pending = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120)
    assert pending.returncode == 1, pending
    assert pending.stdout.splitlines() == [
        "pending 012_spread: CANNOT run beside the previous release: take_run(uuid, text, float8, boolean) is "
        "dropped for its new signature, which the release before still calls"
    ]
