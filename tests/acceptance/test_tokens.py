"""`ticketiq tokens create|list|revoke` and a real `ticketiq serve` that takes the tokens, as subprocesses.

A token is printed once, on stdout alone; bad input is one line on stderr, exit code 2, nothing written;
and neither a token nor its hash reaches the app process's log, whatever requests carried it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import dict_row

from tests.support import preforked
from tests.support.http import web
from ticketiq.operate.launch import Child, start_serve, start_standins


def cli_env(db_url: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
    env.update({"TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp_path / "home"),
                "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret"})  # fmt: skip
    return env


def tokens_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return preforked.run([sys.executable, "-m", "ticketiq.cli", "tokens", *args], env=env, timeout=120)


def rows(db_url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def written(db_url: str) -> list[dict[str, Any]]:
    return rows(db_url, "SELECT 'token' AS t, name, revoked_at::text AS at FROM api_tokens "
                        "UNION ALL SELECT 'audit', action, at::text FROM audit_log ORDER BY 1, 2, 3")  # fmt: skip


def test_a_token_is_made_shown_once_listed_and_revoked_by_the_cli(db_url: str, tmp_path: Path) -> None:
    env = cli_env(db_url, tmp_path)
    made = tokens_cli(env, "create", "--name", "alice", "--role", "caller", "--agents", "triage,reader")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert made.stdout == f"{token}\n" and token.startswith("tiq_") and len(token) == 47
    assert "shown this once" in made.stderr and "Authorization: Bearer $TICKETIQ_TOKEN" in made.stderr
    assert token not in made.stderr
    operator = tokens_cli(env, "create", "--name", "ops", "--role", "operator")
    assert operator.returncode == 0, operator.stderr
    stored = rows(db_url, "SELECT name, role, agents, token_hash FROM api_tokens ORDER BY name")
    assert stored == [
        {"name": "alice", "role": "caller", "agents": ["reader", "triage"],
         "token_hash": hashlib.sha256(token.encode()).hexdigest()},
        {"name": "ops", "role": "operator", "agents": None,
         "token_hash": hashlib.sha256(operator.stdout.strip().encode()).hexdigest()},
    ]  # fmt: skip

    listed = tokens_cli(env, "list")
    assert listed.returncode == 0, listed.stderr
    lines = [line.split() for line in listed.stdout.splitlines()]
    assert lines[0] == ["NAME", "ROLE", "AGENTS", "CREATED", "REVOKED"]
    assert [line[:3] + line[4:] for line in lines[1:]] == [["alice", "caller", "reader,triage", "-"],
                                                           ["ops", "operator", "*", "-"]]  # fmt: skip
    assert token not in listed.stdout and stored[0]["token_hash"] not in listed.stdout

    revoked = tokens_cli(env, "revoke", "--name", "alice")
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout == "revoked token alice: requests with it are refused from now on\n"
    after = [line.split() for line in tokens_cli(env, "list").stdout.splitlines()]
    assert after[1][0] == "alice" and after[1][4] != "-"
    assert after[2][0] == "ops" and after[2][4] == "-"
    audit = rows(db_url, "SELECT action, actor, detail->>'name' AS name FROM audit_log ORDER BY id")
    assert audit == [
        {"action": "token.created", "actor": "cli", "name": "alice"},
        {"action": "token.created", "actor": "cli", "name": "ops"},
        {"action": "token.revoked", "actor": "cli", "name": "alice"},
    ]


def test_bad_input_to_the_tokens_cli_is_one_line_exit_code_2_and_nothing_written(db_url: str, tmp_path: Path) -> None:
    env = cli_env(db_url, tmp_path)
    assert tokens_cli(env, "create", "--name", "alice", "--role", "caller").returncode == 0
    assert tokens_cli(env, "revoke", "--name", "alice").returncode == 0
    before = written(db_url)
    for args, says in [
        (["create", "--name", "bob", "--role", "root"], "role 'root' is not one of caller, operator, admin"),
        (["create", "--name", "", "--role", "caller"], "token name '' is not valid: use 1 to 100 letters"),
        (["create", "--name", "has space", "--role", "caller"], "token name 'has space' is not valid"),
        (["create", "--name", "alice", "--role", "admin"], "a token named alice exists; choose another name"),
        (["create", "--name", "bob", "--role", "caller", "--agents", "nobody"], "no agent named nobody in the agents"),
        (["create", "--name", "bob", "--role", "caller", "--agents", ""], "name at least one agent"),
        (["revoke", "--name", "nobody"], "no token named nobody; `ticketiq tokens list` shows the names"),
        (["revoke", "--name", "alice"], "token alice was revoked already, at "),
    ]:
        refused = tokens_cli(env, *args)
        assert refused.returncode == 2, (args, refused.stderr)
        assert refused.stdout == ""
        assert refused.stderr.startswith(f"ticketiq: {says}"), (args, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert written(db_url) == before


def test_no_token_nor_its_hash_reaches_the_log_of_a_real_serve(db_url: str, tmp_path: Path) -> None:
    env = {**cli_env(db_url, tmp_path), "TICKETIQ_LOG_LEVEL": "DEBUG"}
    made = {name: tokens_cli(env, "create", "--name", name, "--role", role).stdout.strip()
            for name, role in [("ops", "operator"), ("gone", "admin"), ("cal", "caller")]}  # fmt: skip
    assert tokens_cli(env, "revoke", "--name", "gone").returncode == 0
    unknown = "tiq_" + "A" * 43
    children: list[Child] = []
    try:
        standins = start_standins(env, tmp_path)
        children.append(standins)
        app, base = start_serve({**env, **standins.env}, tmp_path)
        children.append(app)
        good = {"Authorization": f"Bearer {made['ops']}"}
        run_id = web.post(f"{base}/v1/runs", json={"agent": "triage", "input": "Triage OPS-901"}, headers=good,
                            timeout=30).json()["id"]  # fmt: skip
        deadline = time.monotonic() + 60
        while web.get(f"{base}/v1/runs/{run_id}", headers=good, timeout=30).json()["status"] != "succeeded":
            assert time.monotonic() < deadline, app.log_tail()
            time.sleep(0.1)
        seen = [
            web.get(f"{base}/v1/runs/{run_id}/transcript", headers=good, timeout=30).status_code,
            web.get(f"{base}/v1/audit", headers=good, timeout=30).status_code,
            web.post(f"{base}/v1/runs", json={"agent": "triage"}, headers=good, timeout=30).status_code,
            web.get(f"{base}/v1/tokens", headers=good, timeout=30).status_code,
            web.get(f"{base}/v1/audit", headers={"Authorization": f"Bearer {made['cal']}"}, timeout=30).status_code,
            web.get(f"{base}/v1/audit", headers={"Authorization": f"Bearer {made['gone']}"}, timeout=30).status_code,
            web.get(f"{base}/v1/audit", headers={"Authorization": f"Bearer {unknown}"}, timeout=30).status_code,
            web.get(f"{base}/v1/audit", headers={"Authorization": f"Basic {made['ops']}"}, timeout=30).status_code,
            web.get(f"{base}/v1/audit", params={"token": made["ops"]}, timeout=30).status_code,
        ]
        assert seen == [200, 200, 422, 403, 403, 401, 401, 401, 401]
    finally:
        for child in reversed(children):
            child.stop()
    log = app.log_path.read_text(errors="replace")
    assert " ready" in log  # the log is there, at DEBUG
    for token in [*made.values(), unknown]:
        assert token not in log
        assert hashlib.sha256(token.encode()).hexdigest() not in log
