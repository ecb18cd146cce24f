"""The real CLI as subprocesses: `ticketiq standins` and `ticketiq serve` over one Postgres."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import preforked
from tests.support.cluster import create_token
from tests.support.http import web
from ticketiq.operate.launch import Child, start_serve, start_standins


@pytest.fixture
def stack(db_url: str, tmp_path: Path) -> Iterator[tuple[str, Child, dict[str, str]]]:
    """The stand-ins and an app process; the env holds TICKETIQ_TOKEN, an admin token the real CLI made."""
    env = {
        **os.environ,
        "TICKETIQ_DATABASE_URL": db_url,
        "TICKETIQ_HOME": str(tmp_path / "home"),
        "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret",
    }
    children: list[Child] = []
    try:
        token = create_token(env, "acceptance", "admin")
        standins = start_standins(env, tmp_path)
        children.append(standins)
        app, base = start_serve({**env, **standins.env}, tmp_path)
        children.append(app)
        yield base, standins, {**env, **standins.env, "TICKETIQ_TOKEN": token}
    finally:
        for child in reversed(children):
            child.stop()


def bearer(env: dict[str, str]) -> dict[str, str]:
    return {"Authorization": f"Bearer {env['TICKETIQ_TOKEN']}"}


def wait_for(base: str, run_id: str, auth: dict[str, str], timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = web.get(f"{base}/v1/runs/{run_id}", headers=auth).json()
        if run["status"] in ("succeeded", "failed"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not end: {run}")


def test_concurrent_triage_runs_write_each_vendor_once_per_ticket(
    stack: tuple[str, Child, dict[str, str]],
) -> None:
    base, standins, env = stack
    assert standins.env["TICKETIQ_MODEL_BASE_URL"].endswith("/v1")
    ids = [
        web.post(
            f"{base}/v1/runs", json={"agent": "triage", "input": f"Triage OPS-{n}: it broke"}, headers=bearer(env)
        ).json()["id"]
        for n in (101, 102, 103)
    ]
    runs = [wait_for(base, run_id, bearer(env)) for run_id in ids]
    assert [r["status"] for r in runs] == ["succeeded"] * 3, runs
    assert all(r["steps"] == 3 for r in runs)
    standin = standins.env["TICKETIQ_MODEL_BASE_URL"].removesuffix("/v1")
    writes = web.get(f"{standin}/_standin/writes").json()
    rows = writes["writes"] if isinstance(writes, dict) else writes
    for n in (101, 102, 103):
        # One incident, one comment and one Teams reply per ticket, each applied once.
        mine = [w for w in rows if f"OPS-{n}" in str(w)]
        assert len([w for w in mine if w["vendor"] == "jira"]) == 1, mine
        assert all(w["effect"] == "applied" for w in mine)
    assert len([w for w in rows if w["vendor"] == "incidentio"]) == 3
    assert len([w for w in rows if w["vendor"] == "teams"]) == 3
    keys = [w["key"] for w in rows]
    assert len(set(keys)) == len(keys)  # every write carried its own step key


def test_the_cli_says_what_to_do_on_bad_settings(tmp_path: Path) -> None:
    env = {**os.environ, "TICKETIQ_LEASE_TTL_S": "soon", "TICKETIQ_HOME": str(tmp_path)}
    result = preforked.run([sys.executable, "-m", "ticketiq.cli", "db", "url"], env=env, timeout=60)
    assert result.returncode == 2
    assert "TICKETIQ_LEASE_TTL_S='soon' is not valid" in result.stderr
    assert "Fix or unset it" in result.stderr


def test_db_url_starts_an_embedded_server_that_a_second_caller_reuses() -> None:
    # A home outside pytest's temporary root: as root the server runs as another user, who loses its way
    # in when a pytest session started meanwhile narrows that root's mode (seen: initdb's PANIC).
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-db-url-") as folder:
        db_url_for_its_owner_only(Path(folder))


def db_url_for_its_owner_only(folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TICKETIQ_DATABASE_URL"}
    env["TICKETIQ_HOME"] = str(folder / "home")
    cli = [sys.executable, "-m", "ticketiq.cli", "db"]
    try:
        first = preforked.run([*cli, "url"], env=env, timeout=120)
        second = preforked.run([*cli, "url"], env=env, timeout=120)
        assert first.returncode == second.returncode == 0, first.stderr + second.stderr
        assert first.stdout == second.stdout
        assert first.stdout.startswith("postgresql://")
        import psycopg
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        url = first.stdout.strip()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        # It works for the home's owner, by the password in it (kept in the home, 0600); without it, no.
        params = conninfo_to_dict(url)
        assert params["password"] == (folder / "home" / "pg.password").read_text().strip()
        assert oct((folder / "home" / "pg.password").stat().st_mode & 0o777) == "0o600"
        del params["password"]
        with pytest.raises(psycopg.OperationalError, match="no password supplied"):
            psycopg.connect(make_conninfo("", **params), passfile="/nonexistent/.pgpass").close()
    finally:
        stopped = subprocess.run([*cli, "stop"], env=env, capture_output=True, text=True, timeout=120)
    assert stopped.stdout.strip() == "stopped"
