"""Writes `tests/previous_release/d7c25d5.sql`: a database that the release before issue 31 (commit d7c25d5)
really wrote, with runs its processes left in flight when they were killed, for the tests that resume
them with the code of today (`test_previous_release.py`). Not typed by hand: this script runs that
release's own code (a git worktree of it, on this venv's libraries) and dumps what it wrote.

    .venv/bin/python -m tests.previous_release.make_fixture      # about a minute; rewrites the .sql

What the database holds: that release's schema (its migrations, 001..028), a seal key probe for the key
`crash:crash-test-secret` (the test clusters' key), the stand-ins' records, and one triage run per
scenario, each killed (SIGKILL, by its own fault point) at a named point of its write path: after step
1's checkpoint, after step 2's, after a write was marked in doubt, after a write was sent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ticketiq.dbserver import embedded
from ticketiq.operate.launch import start_serve, start_standins

RELEASE = "d7c25d5"
HERE = Path(__file__).resolve().parent
FIXTURE = HERE / f"{RELEASE}.sql"
SEAL_KEYS = "crash:crash-test-secret"
# (fault point, at its Nth hit, the ticket): each kills its own process mid-run.
SCENARIOS = (("after_checkpoint", 1, 7001), ("after_checkpoint", 2, 7002), ("after_mark", 1, 7003),
             ("after_send", 1, 7004))  # fmt: skip
TRIAGE = "Triage OPS-{n}: checkout is failing"


def cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "ticketiq.cli", *args], env=env, capture_output=True, text=True,
                          timeout=180)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"ticketiq {' '.join(args)} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout.strip()


def main() -> None:
    repo = HERE.parents[1]
    with tempfile.TemporaryDirectory(prefix="ticketiq-previous-") as folder:
        tmp = Path(folder)
        tree = tmp / RELEASE
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), RELEASE], check=True,
                       capture_output=True, timeout=120)  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
        # That release's code before this venv's: the same libraries, its own package.
        env.update({"PYTHONPATH": str(tree / "src"), "TICKETIQ_HOME": str(tmp / "home"),
                    "TICKETIQ_SEAL_KEYS": SEAL_KEYS, "TICKETIQ_LOG_LEVEL": "INFO"})  # fmt: skip
        try:
            env["TICKETIQ_DATABASE_URL"] = cli(env, "db", "url")
            admin = cli(env, "tokens", "create", "--name", "previous-release-admin", "--role", "admin")
            standins = start_standins(env, tmp)
            try:
                for point, after, ticket in SCENARIOS:
                    faulty = {**env, **standins.env, "TICKETIQ_FAULT_POINT": point, "TICKETIQ_FAULT_AFTER": str(after),
                              "TICKETIQ_CALL_CONCURRENCY": "1",
                              # No victim leads: none takes over the runs of those killed before it.
                              "TICKETIQ_LEAD": "false"}  # fmt: skip
                    victim, base = start_serve(faulty, tmp, name=f"victim-{ticket}")
                    made = subprocess.run(
                        ["curl", "-sf", "-X", "POST", f"{base}/v1/runs", "-H", f"Authorization: Bearer {admin}",
                         "-H", "Content-Type: application/json",
                         "-d", f'{{"agent": "triage", "input": "{TRIAGE.format(n=ticket)}"}}'],
                        capture_output=True, text=True, timeout=60,
                    )  # fmt: skip
                    if made.returncode != 0:
                        raise SystemExit(f"the run of OPS-{ticket} was not made: {made.stderr}\n{victim.log_tail()}")
                    if victim.proc.wait(60) != -9:
                        raise SystemExit(f"victim-{ticket} did not die at {point}:\n{victim.log_tail()}")
                    print(f"OPS-{ticket}: killed at {point} (hit {after})", flush=True)
            finally:
                standins.stop()
            dump = subprocess.run(
                [str(embedded.client("pg_dump")), "--inserts", "--no-owner", "--no-privileges", "--no-comments",
                 "--dbname", env["TICKETIQ_DATABASE_URL"]],
                capture_output=True, text=True, timeout=120, check=True,
            )  # fmt: skip
            head = (f"-- Written by tests/previous_release/make_fixture.py from commit {RELEASE}: what that release's\n"
                    "-- own processes wrote, each killed mid-run. Do not edit: run the script again.\n")  # fmt: skip
            # psql's own meta-commands (pg_dump 17.6 and later fence the dump with \\restrict): the dump is run
            # as plain SQL by the test, on one connection.
            text = "".join(line for line in dump.stdout.splitlines(keepends=True) if not line.startswith("\\"))
            FIXTURE.write_text(head + text)
            print(f"wrote {FIXTURE} ({len(dump.stdout) // 1024} KiB)")
        finally:
            cli(env, "db", "stop")
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], timeout=120)


if __name__ == "__main__":
    main()
