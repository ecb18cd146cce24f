"""Recovery time after a process dies or stalls, with real `ticketiq serve` processes.

    .venv/bin/python bench/recovery.py [--kills 20] [--stalls 5]

Each trial starts a fresh victim process, gives it a triage run, waits until the run is in flight
(its first step written), then SIGKILLs it (or SIGSTOPs it, for a stall). Recovery time is from the
signal to the run executing again on the survivor: the `agent.run.crash_resumed` audit row, which the
new attempt writes once it verified the checkpoint, passed the gates and settled the calls left. Both
instants are read on the database clock. Targets: SIGKILL p50 <= 2 s and p99 <= 5 s (death detected
by the freed liveness mark); SIGSTOP <= 11 s (the 8 s lease plus a 3 s sweep; the leader sweeps just
after the first held lease lapses, so a stall is taken over 6 to 8 s after it began, by when the victim
last renewed).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.rows import dict_row

from ticketiq.launch import Child, start_serve, start_standins
from ticketiq.storage import embedded
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


def trial(url: str, env: dict[str, str], logs: Path, n: int, sig: signal.Signals) -> float | None:
    victim, base = start_serve({**env, "TICKETIQ_LEAD": "false"}, logs, name=f"victim{n}")
    try:
        run_id = httpx.post(f"{base}/v1/runs", json={"agent": "triage", "input": f"Triage OPS-{n}"},
                            timeout=30).json()["id"]  # fmt: skip
        started = wait(lambda: rows(url, "SELECT step FROM checkpoints WHERE run_id = %s", run_id)[0]["step"] >= 1, 30)
        if not started:
            return None
        os.kill(victim.pid, sig)
        signalled = rows(url, "SELECT clock_timestamp() AS t")[0]["t"]
        resumed: list[dict[str, Any]] = []

        def found() -> bool:
            resumed[:] = rows(url, "SELECT at FROM audit_log WHERE run_id = %s AND action = 'agent.run.crash_resumed'",
                              run_id)  # fmt: skip
            return bool(resumed)

        if not wait(found, 60):
            return None
        wait(lambda: rows(url, "SELECT status FROM runs WHERE id = %s", run_id)[0]["status"] == "succeeded", 60)
        return float((resumed[0]["at"] - signalled).total_seconds())
    finally:
        if sig is signal.SIGSTOP and victim.alive():
            os.kill(victim.pid, signal.SIGCONT)
        victim.kill()


def report(label: str, samples: list[float], target: str) -> None:
    if not samples:
        print(f"{label}: no samples")
        return
    ordered = sorted(samples)
    p = statistics.quantiles(ordered, n=100, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 99
    print(f"{label}: n={len(ordered)}  p50 {statistics.median(ordered):.2f} s  p95 {p[94]:.2f} s  "
          f"p99 {p[98]:.2f} s  max {ordered[-1]:.2f} s   (target {target})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--stalls", type=int, default=5)
    parser.add_argument("--model-latency-ms", type=int, default=500)
    args = parser.parse_args()
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
            standins = start_standins(env, folder, "--model-latency-ms", str(args.model_latency_ms))
            children.append(standins)
            env.update(standins.env)
            survivor, _ = start_serve({**env, "TICKETIQ_LEAD": "true"}, folder, name="survivor")
            children.append(survivor)
            kills = [
                t for n in range(args.kills) if (t := trial(url, env, folder, 2000 + n, signal.SIGKILL)) is not None
            ]
            report("SIGKILL recovery", kills, "p50 <= 2 s, p99 <= 5 s")
            stalls = [
                t for n in range(args.stalls) if (t := trial(url, env, folder, 3000 + n, signal.SIGSTOP)) is not None
            ]
            report("SIGSTOP recovery", stalls, "<= 11 s")
        finally:
            for child in reversed(children):
                child.stop()
            embedded.stop(server.home)


if __name__ == "__main__":
    main()
