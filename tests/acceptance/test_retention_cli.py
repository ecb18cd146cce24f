"""Issue 34's done-when, as an operator meets it: a real `ticketiq serve` with TICKETIQ_RETENTION_RUNS=3s and
the stand-ins, six finished reader runs (one held) and an asker run waiting for input; `ticketiq retention
run` four seconds later, as a subprocess."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.support import postgres, preforked
from tests.support.cluster import create_token
from tests.support.http import web
from ticketiq.operate.launch import Child, start_serve, start_standins

ENDED = ("succeeded", "failed", "interrupted", "stopped")


@pytest.fixture
def site(pg: postgres.SuitePostgres, tmp_path: Any) -> Iterator[tuple[str, dict[str, str], str]]:
    db_url = pg.fresh_database()
    env = {k: v for k, v in os.environ.items() if k not in ("TICKETIQ_TOKEN", "TICKETIQ_URL")}
    env |= {"TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp_path / "home"),
            "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret", "TICKETIQ_RETENTION_RUNS": "3s"}  # fmt: skip
    children: list[Child] = []
    try:
        standins = start_standins(env, tmp_path)
        children.append(standins)
        app, base = start_serve({**env, **standins.env}, tmp_path)
        children.append(app)
        yield base, {**env, "TICKETIQ_URL": base}, db_url
    finally:
        for child in reversed(children):
            child.stop()
        pg.give_back(db_url)


def cli(env: dict[str, str], *args: str) -> Any:
    return preforked.run([sys.executable, "-m", "ticketiq.cli", *args], env=env, timeout=120)


def until(base: str, token: str, run_id: str, statuses: tuple[str, ...]) -> dict[str, Any]:
    deadline = time.monotonic() + 90
    while True:
        run: dict[str, Any] = web.get(f"{base}/v1/runs/{run_id}", headers=auth(token)).json()
        if run["status"] in statuses:
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.1)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def naming(db_url: str, run_ids: list[str]) -> dict[str, int]:
    """Rows of every table with a run_id column (and runs by id) that name one of `run_ids`."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT c.table_name FROM information_schema.columns c JOIN information_schema.tables t USING "
            "(table_schema, table_name) WHERE c.table_schema = 'public' AND c.column_name = 'run_id' "
            "AND t.table_type = 'BASE TABLE'").fetchall()]  # fmt: skip
        found = {}
        for table in [*tables, "runs"]:
            column = "id" if table == "runs" else "run_id"
            row = conn.execute(f"SELECT count(*) FROM {table} WHERE {column} = ANY(%s::uuid[])", (run_ids,)).fetchone()
            found[table] = row[0] if row else 0
    return found


def test_a_pass_purges_the_unheld_ended_runs_and_keeps_the_held_and_the_waiting(
    site: tuple[str, dict[str, str], str],
) -> None:
    base, env, db_url = site
    token = create_token(env, f"ops-{time.time_ns()}", "operator")
    ids = []
    for n in range(6):
        made = web.post(
            f"{base}/v1/runs", json={"agent": "reader", "input": f"Read OPS-{500 + n}"}, headers=auth(token)
        )
        ids.append(made.json()["id"])
    asking = web.post(f"{base}/v1/runs", json={"agent": "asker", "input": "Note OPS-510", "may_wait": True},
                      headers=auth(token)).json()["id"]  # fmt: skip
    for run_id in ids:
        until(base, token, run_id, ENDED)
    waiting = until(base, token, asking, ("waiting",))
    held = ids[0]
    assert (
        web.post(f"{base}/v1/runs/{held}/hold", json={"reason": "audit 2026"}, headers=auth(token)).status_code == 200
    )
    time.sleep(4)

    purged = cli(env, "retention", "run")
    assert purged.returncode == 0, purged.stderr
    assert "deleted:" in purged.stdout and "runs" in purged.stdout
    for run_id in ids[1:]:
        assert web.get(f"{base}/v1/runs/{run_id}", headers=auth(token)).status_code == 404
    assert set(naming(db_url, ids[1:]).values()) == {0}
    assert naming(db_url, [held])["checkpoints"] == 1 and naming(db_url, [asking])["checkpoints"] == 1

    question = waiting["waiting_for"]["question_id"]
    given = web.post(f"{base}/v1/runs/{asking}/input", json={"text": "prod", "question_id": question},
                     headers=auth(token))  # fmt: skip
    assert given.status_code == 202, given.text
    assert until(base, token, asking, ENDED)["status"] == "succeeded"

    status = cli(env, "retention", "status", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["policies"]["runs"] == "3s" and shown["held_runs"] == 1
    assert shown["last_pass"]["deleted"]["runs"] == 5 and shown["tables"]["runs"]["rows"] == 2
    human = cli(env, "retention", "status")
    assert "last pass:" in human.stdout and "runs" in human.stdout

    assert web.request("DELETE", f"{base}/v1/runs/{held}/hold", headers=auth(token)).status_code == 200
    time.sleep(3.5)  # the asker ended moments ago: past the policy too by now
    again = cli(env, "retention", "run")
    assert again.returncode == 0, again.stderr
    assert web.get(f"{base}/v1/runs/{held}", headers=auth(token)).status_code == 404
    assert web.get(f"{base}/v1/runs/{asking}", headers=auth(token)).status_code == 404

    wrong = cli({**env, "TICKETIQ_RETENTION_RUNS": "3 weeks"}, "retention", "run")
    assert wrong.returncode == 2 and "TICKETIQ_RETENTION_RUNS" in wrong.stderr
