"""`ticketiq runs export` as a subprocess on the test database: the ended runs of [--since, --until) on
stdout or in --out (gzip by its name), how many on stderr; a time it cannot read is one line naming its
flag, exit code 2, and nothing written."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

from tests.acceptance.test_tokens import cli_env
from tests.integration.test_run_export import MAKE
from tests.support import preforked


def export_cli(db_url: str, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(db_url, tmp_path)
    return preforked.run([sys.executable, "-m", "ticketiq.cli", "runs", "export", *args], env=env, timeout=120)


def made(db_url: str, n: int, at: datetime, open_runs: int = 0) -> list[str]:
    """`n` ended runs a minute apart from `at` (their ids in the order they ended), and `open_runs` running."""
    params = {"n": n, "at": at, "step": timedelta(minutes=1), "open": open_runs, "size": 10}
    with psycopg.connect(db_url, autocommit=True) as conn:
        return [str(r[0]) for r in conn.execute(MAKE, params).fetchall()]


def test_the_ended_runs_go_to_stdout_or_a_gzip_file_and_the_count_to_stderr(db_url: str, tmp_path: Path) -> None:
    old = made(db_url, 2, datetime.now(UTC) - timedelta(days=40))
    recent = made(db_url, 3, datetime.now(UTC) - timedelta(days=3), open_runs=2)

    shown = export_cli(db_url, tmp_path, "--since", "10d", "--until", "1d")
    assert shown.returncode == 0, shown.stderr
    assert [json.loads(line)["run"]["id"] for line in shown.stdout.splitlines()] == recent
    assert "exported 3 runs that ended in [" in shown.stderr and "to stdout" in shown.stderr

    out = tmp_path / "old.jsonl.gz"
    since = (datetime.now(UTC) - timedelta(days=41)).strftime("%Y-%m-%d")
    kept = export_cli(db_url, tmp_path, "--since", since, "--until", "30d", "--out", str(out))
    assert kept.returncode == 0, kept.stderr
    assert kept.stdout == "" and f"exported 2 runs that ended in [{since}T00:00:00+00:00" in kept.stderr
    with gzip.open(out, "rt", encoding="utf-8") as lines:
        assert [json.loads(line)["run"]["id"] for line in lines] == old
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "home") == ["old.jsonl.gz"]


def test_a_time_it_cannot_read_is_one_line_naming_the_flag_and_exit_2(db_url: str, tmp_path: Path) -> None:
    bad = export_cli(db_url, tmp_path, "--since", "yesterday", "--until", "1d")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("ticketiq: --since: 'yesterday' is no time") and bad.stderr.count("\n") == 1
    backwards = export_cli(db_url, tmp_path, "--since", "1d", "--until", "2d")
    assert backwards.returncode == 2 and backwards.stderr.startswith("ticketiq: --until (")
    nowhere = export_cli(db_url, tmp_path, "--since", "2d", "--until", "1d", "--out", str(tmp_path / "no" / "x.gz"))
    assert nowhere.returncode == 2 and nowhere.stderr.startswith("ticketiq: --out: no directory")
