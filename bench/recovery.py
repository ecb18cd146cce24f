"""Recovery time after a process dies or stalls, with real `ticketiq serve` processes.

    .venv/bin/python bench/recovery.py [--kills 20] [--stalls 5] [--doubts 6] [--json PATH]

Each trial starts a fresh victim process, gives it a triage run, waits until the run is in flight
(its first step written), then SIGKILLs it (or SIGSTOPs it, for a stall). A third kind kills the victim
with a write in doubt: it SIGKILLs itself right after marking its Jira comment, or right after Jira
answered it (fault injection, alternately). Recovery time is from the signal to the run executing
again on the survivor: the `agent.run.crash_resumed` audit row, which the new attempt writes once it
verified the checkpoint, passed the gates and settled the calls left (for a write in doubt, after
waiting until it could no longer be in flight: I14). Both instants are read on the database clock.
Targets: SIGKILL p50 <= 2 s and p99 <= 5 s (death detected by the freed liveness mark); SIGSTOP <= 11 s
(the 8 s lease plus a 3 s sweep; the leader sweeps just after the first held lease lapses, so a stall
is taken over 6 to 8 s after it began, by when the victim last renewed); a write in doubt: the write's
budget (TICKETIQ_WRITE_BUDGET_S, 10 s) from its mark, plus the death detection.

`--json PATH` also writes, per kind, the samples and the printed figures (`make evidence` reads them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ticketiq.dbserver import embedded
from ticketiq.operate.launch import Child, start_serve, start_standins
from ticketiq.storage.database import APP_DATABASE


def rows(url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True, row_factory=dict_row) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def wait(check: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def create_token(env: dict[str, str]) -> str:
    """An operator token, made by the real `ticketiq tokens create` (it prints the token alone)."""
    cli = [sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", "bench", "--role", "operator"]
    return subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120, check=True).stdout.strip()


def trial(
    url: str, env: dict[str, str], auth: dict[str, str], logs: Path, n: int, how: str
) -> tuple[float, str] | None:
    """One victim, one triage run, one loss: `kill` (SIGKILL once the first step is written), `stall`
    (SIGSTOP then), or `doubt` (the victim kills itself with its Jira comment in doubt: right after
    marking it, or right after the vendor answered, alternately). Returns the recovery time and how
    the Jira comment was settled."""
    settings = {"TICKETIQ_LEAD": "false", "TICKETIQ_CALL_CONCURRENCY": "1"}
    if how == "doubt":  # the second write of the triage run is the Jira comment
        settings.update({"TICKETIQ_FAULT_POINT": "after_mark" if n % 2 else "after_send", "TICKETIQ_FAULT_AFTER": "2"})
    victim, base = start_serve({**env, **settings}, logs, name=f"victim{n}")
    try:
        run_id = httpx.post(f"{base}/v1/runs", json={"agent": "triage", "input": f"Triage OPS-{n}"},
                            headers=auth, timeout=30).json()["id"]  # fmt: skip
        if how == "doubt":
            victim.proc.wait(60)  # it kills itself at the fault point
        else:
            started = wait(
                lambda: rows(url, "SELECT step FROM checkpoints WHERE run_id = %s", run_id)[0]["step"] >= 1, 30
            )
            if not started:
                return None
            os.kill(victim.pid, signal.SIGKILL if how == "kill" else signal.SIGSTOP)
        signalled = rows(url, "SELECT clock_timestamp() AS t")[0]["t"]
        resumed: list[dict[str, Any]] = []

        def found() -> bool:
            resumed[:] = rows(url, "SELECT at, detail FROM audit_log WHERE run_id = %s "
                                   "AND action = 'agent.run.crash_resumed'", run_id)  # fmt: skip
            return bool(resumed)

        if not wait(found, 60):
            return None
        wait(lambda: rows(url, "SELECT status FROM runs WHERE id = %s", run_id)[0]["status"] == "succeeded", 60)
        settled = {c["tool"]: c["happened"] for c in resumed[0]["detail"]["calls"]}
        return float((resumed[0]["at"] - signalled).total_seconds()), settled.get("jira_add_comment", "-")
    finally:
        if how == "stall" and victim.alive():
            os.kill(victim.pid, signal.SIGCONT)
        victim.kill()


def report(label: str, samples: list[float], target: str) -> dict[str, Any]:
    figures: dict[str, Any] = {"label": label, "target": target, "samples": samples}
    if not samples:
        print(f"{label}: no samples")
        return figures
    ordered = sorted(samples)
    p = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 99
    figures.update(p50=statistics.median(ordered), p95=p[94], p99=p[98], max=ordered[-1])
    print(f"{label}: n={len(ordered)}  p50 {statistics.median(ordered):.2f} s  p95 {p[94]:.2f} s  "
          f"p99 {p[98]:.2f} s  max {ordered[-1]:.2f} s   (target {target})")  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--stalls", type=int, default=5)
    parser.add_argument("--doubts", type=int, default=6)
    parser.add_argument("--model-latency-ms", type=int, default=500)
    parser.add_argument("--json", type=Path, help="also write the samples and figures to this file")
    args = parser.parse_args()
    kinds: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="ticketiq-recovery-") as tmp:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        children: list[Child] = []
        try:
            with psycopg.connect(server.url(), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {APP_DATABASE}")
            url = server.url(APP_DATABASE)
            env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
            env.update({"TICKETIQ_DATABASE_URL": url, "TICKETIQ_HOME": str(folder / "home"),
                        "TICKETIQ_SEAL_KEYS": "bench:recovery-secret"})  # fmt: skip
            auth = {"Authorization": f"Bearer {create_token(env)}"}
            standins = start_standins(env, folder, "--model-latency-ms", str(args.model_latency_ms))
            children.append(standins)
            env.update(standins.env)
            survivor, _ = start_serve({**env, "TICKETIQ_LEAD": "true"}, folder, name="survivor")
            children.append(survivor)
            for how, count, first, label, target in (
                ("kill", args.kills, 2000, "SIGKILL recovery", "p50 <= 2 s, p99 <= 5 s"),
                ("stall", args.stalls, 3000, "SIGSTOP recovery", "<= 11 s"),
                ("doubt", args.doubts, 4000, "SIGKILL, a write in doubt", "<= budget + 2 s"),
            ):
                done = [t for n in range(first, first + count) if (t := trial(url, env, auth, folder, n, how))]
                kinds[how] = report(label, [seconds for seconds, _ in done], target) | {"trials": count}
                if how == "doubt" and done:
                    outcomes = Counter(settled for _, settled in done)
                    print(f"  the comment in doubt was settled as: {outcomes}")
                    kinds[how]["settled"] = dict(outcomes)
        finally:
            for child in reversed(children):
                child.stop()
            embedded.stop(server.home)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {"model_latency_ms": args.model_latency_ms, "kinds": kinds}
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
