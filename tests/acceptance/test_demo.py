"""`ticketiq demo`, twice over one database, as a newcomer runs it: each counts only its own run's
writes, and `--keep` prints settings the examples of docs/entry-points.md and the CLI work with as
printed. The operator token each makes lives as long as the demo: revoked when it ends, the kept one when
it is stopped (issue 32, finding 8: it stayed valid for good)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.http import web

DEMO = [sys.executable, "-m", "ticketiq.cli", "demo"]
WRITES = "vendor writes the stand-ins took for run "


@contextlib.contextmanager
def demo(env: dict[str, str], *args: str) -> Iterator[subprocess.Popen[str]]:
    """`ticketiq demo` in a process group of its own. However the test ends, it is stopped as a person
    stops it (SIGTERM: it stops its app and stand-ins), and only if it lingers is its group killed,
    so no app process or stand-in outlives the test."""
    proc = subprocess.Popen([*DEMO, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(60)
        _end_group(proc.pid)  # the group is the demo's own: what it started and left behind, if anything
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def _end_group(group: int) -> None:
    deadline = time.monotonic() + 30
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, sig)
        while time.monotonic() < deadline:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)


def token_of(printed: str) -> str:
    """The name of the token the demo made, from its `token` line."""
    [line] = [line for line in printed.splitlines() if line.startswith("token ") and "(operator)" in line]
    return line.split()[1]


def revoked(db_url: str, name: str) -> list[tuple[Any, ...]]:
    """The token's revocation: when, and who revoked it (its audit row)."""
    with psycopg.connect(db_url) as conn:
        return list(conn.execute(
            "SELECT t.revoked_at IS NOT NULL, a.actor FROM api_tokens t LEFT JOIN audit_log a "
            "ON a.action = 'token.revoked' AND a.detail ->> 'name' = t.name WHERE t.name = %s", (name,)))  # fmt: skip


def three_writes(counted: str) -> bool:
    """Whether the demo's line counts 3 writes: the incident (a step of its own), then the Jira comment and
    the Teams reply, which the triage script sends at once in one step, so they land in either order."""
    head, _, vendors = counted.rstrip().rpartition(": 3 (")
    incident, *together = vendors.removesuffix(")").split(", ")
    return bool(head) and incident == "incidentio" and sorted(together) == ["jira", "teams"]


@pytest.mark.long
def test_a_second_demo_counts_its_own_writes_and_keep_prints_what_the_examples_need(
    db_url: str, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TICKETIQ_URL", "TICKETIQ_TOKEN")}
    env |= {"TICKETIQ_DATABASE_URL": db_url, "TICKETIQ_HOME": str(tmp_path / "home"),
            "TICKETIQ_SEAL_KEYS": "acc:acceptance-secret"}  # fmt: skip
    with demo(env) as first:
        printed, _ = first.communicate(timeout=300)
    assert first.returncode == 0, printed[-3000:]
    [counted] = [line for line in printed.splitlines() if line.startswith(WRITES)]
    assert three_writes(counted), counted
    first_token = token_of(printed)
    assert f"token     {first_token} revoked: the demo is over" in printed
    assert revoked(db_url, first_token) == [(True, "demo")]

    # The second, kept running: the stand-ins hold the first one's writes too, in the same database.
    with demo(env, "--keep") as kept:
        assert kept.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].strip().startswith("S="):
            line = kept.stdout.readline()
            assert line, "".join(lines[-40:])  # the demo ended before it printed the settings
            lines.append(line)
        [counted] = [line for line in lines if line.startswith(WRITES)]
        assert three_writes(counted), counted
        run_id = counted[len(WRITES) :].split(":")[0]
        [exports] = [line.split(None, 1)[1] for line in lines if line.strip().startswith("export TICKETIQ_URL=")]
        pasted = dict(word.split("=", 1) for word in shlex.split(exports))
        standins = lines[-1].split()[0].removeprefix("S=")
        assert f"{pasted['TICKETIQ_URL']}/console/runs/{run_id}" in "".join(lines)
        # As printed, they are what the CLI and the examples of docs/entry-points.md use.
        listed = subprocess.run(
            [sys.executable, "-m", "ticketiq.cli", "runs", "show", run_id, "--json"],
            env={**env, **pasted}, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert listed.returncode == 0, listed.stderr
        assert web.get(f"{standins}/_standin/writes", params={"vendor": "teams"}).status_code == 200
        kept_token = token_of("".join(lines))
        assert revoked(db_url, kept_token) == [(False, None)]  # valid while the kept app runs
        kept.send_signal(signal.SIGTERM)
        rest, _ = kept.communicate(timeout=120)
    assert kept.returncode == 0, rest
    assert rest.rstrip().endswith(f"run {run_id}: succeeded")
    assert f"token     {kept_token} revoked: the demo is over" in rest
    assert revoked(db_url, kept_token) == [(True, "demo")]
