"""Event streams against one app process (issue 32): how many of 3,000 `GET /v1/runs/{id}/events` are
held and how many refused, and whether readiness and the operator's run list stay quick meanwhile.

    .venv/bin/python bench/streams.py [--streams 3000] [--tokens 150] [--hold-s 10]
                                      [--serve-pythonpath DIR] [--json PATH]

Everything runs for real: an embedded Postgres (its own, in a temporary home), the stand-ins and one
`ticketiq serve` with its default settings (TICKETIQ_MAX_STREAMS_PER_PRINCIPAL 20, TICKETIQ_MAX_STREAMS
1,000, TICKETIQ_STREAM_MAX_S 300). Each caller token starts an `asker` run, which waits for input. Then:

1. One token opens `--streams` streams on its waiting run, 100 connecting at a time (a raw HTTP/1.1 client:
   each stream's status line is read, a held one is kept open and not read further).
2. `--tokens` tokens open `--streams` streams between them (as many each) on their own waiting runs;
   then, with the streams still held, each run is given its input (every followed run changes at once).

Beside each phase a probe (a thread of its own) asks `/readyz` every 0.25 s and times the operator's
`GET /v1/runs?limit=50` back to back. Printed per phase: streams accepted (200), refused (429) and other
answers, the /readyz statuses and their slowest answer, the run list's latency percentiles while the
streams were being opened and while they were held, and the app process's CPU seconds; with the machine's
cores and load beside them (the probe's own requests are in the app's CPU). It asserts nothing.

`--serve-pythonpath DIR` serves another tree's code (e.g. `git archive` of a commit before the caps, into
DIR: then DIR/src), for a before and after on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil
import psycopg

from ticketiq.dbserver import embedded
from ticketiq.operate.launch import Child, start_serve, start_standins
from ticketiq.storage.database import APP_DATABASE

CONNECTING_AT_ONCE = 100
PROBE_S = 0.25


@dataclass
class Probe:
    """/readyz every PROBE_S and the run list back to back, from a thread of its own, until stopped."""

    base: str
    auth: dict[str, str]
    ready: list[tuple[int, float]] = field(default_factory=list)  # (status or 0: no answer, seconds)
    listed: list[float] = field(default_factory=list)  # ms of each GET /v1/runs?limit=50 that answered 200
    failed_lists: Counter[str] = field(default_factory=Counter)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Probe:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Probe:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self

    def _run(self) -> None:
        with httpx.Client(base_url=self.base, timeout=10.0) as client:
            next_ready = 0.0
            while not self._stop.is_set():
                if time.monotonic() >= next_ready:
                    next_ready = time.monotonic() + PROBE_S
                    started = time.perf_counter()
                    try:
                        status = client.get("/readyz").status_code
                    except httpx.HTTPError:
                        status = 0
                    self.ready.append((status, time.perf_counter() - started))
                started = time.perf_counter()
                try:
                    got = client.get("/v1/runs", params={"limit": 50}, headers=self.auth)
                except httpx.HTTPError as exc:
                    self.failed_lists[type(exc).__name__] += 1
                    continue
                if got.status_code == 200:
                    self.listed.append((time.perf_counter() - started) * 1000)
                else:
                    self.failed_lists[str(got.status_code)] += 1

    def figures(self) -> dict[str, Any]:
        return {"readyz": dict(Counter(str(s) for s, _ in self.ready)),
                "readyz_slowest_ms": round(max((t for _, t in self.ready), default=0) * 1000, 1),
                "run_list_ms": percentiles(self.listed), "run_list_failed": dict(self.failed_lists)}  # fmt: skip


def percentiles(samples: list[float]) -> dict[str, float]:
    if not samples:
        return {"n": 0}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"n": len(ordered), "p50": at(0.5), "p95": at(0.95), "p99": at(0.99), "max": round(ordered[-1], 1),
            "mean": round(statistics.fmean(ordered), 1)}  # fmt: skip


class Streams:
    """Raw HTTP/1.1 event streams: opened, their status read, the held ones kept open."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.held: list[asyncio.StreamWriter] = []
        self.answers: Counter[str] = Counter()

    async def open(self, run_id: str, token: str, gate: asyncio.Semaphore) -> None:
        async with gate:
            try:
                reader, writer = await asyncio.open_connection(self.host, self.port)
                writer.write(f"GET /v1/runs/{run_id}/events HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer "
                             f"{token}\r\nAccept: text/event-stream\r\n\r\n".encode())  # fmt: skip
                await writer.drain()
                status = (await asyncio.wait_for(reader.readline(), 60)).split(b" ")[1].decode()
            except (OSError, TimeoutError, IndexError) as exc:
                self.answers[type(exc).__name__] += 1
                return
        self.answers[status] += 1
        if status == "200":
            self.held.append(writer)
        else:
            writer.close()

    async def close(self) -> None:
        for writer in self.held:
            writer.close()
        for writer in self.held:
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self.held.clear()


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


async def phase(
    name: str, base: str, auth: dict[str, str], app: Child, attempts: list[tuple[str, str]], hold_s: float,
    while_held: Any = None,
) -> dict[str, Any]:  # fmt: skip
    """Open every (run id, token) in `attempts` as a stream, probing meanwhile; hold them `hold_s`."""
    print(f"\n{name}: {len(attempts)} streams of {len({t for _, t in attempts})} token(s)", flush=True)
    streams = Streams(base)
    gate = asyncio.Semaphore(CONNECTING_AT_ONCE)
    cpu_before = cpu_s(app.pid)
    opening = Probe(base, auth).start()
    started = time.monotonic()
    await asyncio.gather(*(streams.open(run_id, token, gate) for run_id, token in attempts))
    opened_s = time.monotonic() - started
    await asyncio.to_thread(opening.stop)
    cpu_opened = cpu_s(app.pid)
    held = Probe(base, auth).start()
    await asyncio.sleep(hold_s)
    await asyncio.to_thread(held.stop)
    cpu_held = cpu_s(app.pid)
    changed: dict[str, Any] = {}
    if while_held is not None:
        wave = Probe(base, auth).start()
        changed = await while_held()
        await asyncio.to_thread(wave.stop)
        changed["probe"] = wave.figures()
        changed["app_cpu_s"] = round(cpu_s(app.pid) - cpu_held, 2)
    await streams.close()
    cpu = {"opening": round(cpu_opened - cpu_before, 2), "held": round(cpu_held - cpu_opened, 2)}
    figures = {"answers": dict(streams.answers), "opened_in_s": round(opened_s, 2),
               "while_opening": opening.figures(), "while_held": held.figures(), "app_cpu_s": cpu,
               **({"change": changed} if changed else {})}  # fmt: skip
    print(json.dumps(figures, indent=2), flush=True)
    await asyncio.sleep(2.0)  # the server notices the closed streams and gives their slots back
    return figures


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())  # fmt: skip
    return {"cores": os.cpu_count(), "cpu": cpu, "load": [round(x, 2) for x in os.getloadavg()],
            "python": platform.python_version(), "kernel": platform.release()}  # fmt: skip


def waiting_runs(client: httpx.Client, tokens: list[str]) -> list[str]:
    """Each token starts an `asker` run; returns their ids once all wait for input."""
    ids = []
    for n, token in enumerate(tokens):
        made = client.post("/v1/runs", json={"agent": "asker", "input": f"Note OPS-{9000 + n}"},
                           headers={"Authorization": f"Bearer {token}"})  # fmt: skip
        made.raise_for_status()
        ids.append(str(made.json()["id"]))
    deadline = time.monotonic() + 120
    for run_id, token in zip(ids, tokens, strict=True):
        while (
            client.get(f"/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"}).json()["status"] != "waiting"
        ):
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_id} never waited")
            time.sleep(0.1)
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=3000)
    parser.add_argument("--tokens", type=int, default=150)
    parser.add_argument("--hold-s", type=float, default=10.0)
    parser.add_argument("--serve-pythonpath", type=Path, help="serve the code of this tree's src/ instead")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    out: dict[str, Any] = {"machine_before": machine(), "streams": args.streams, "tokens": args.tokens}
    with tempfile.TemporaryDirectory(prefix="ticketiq-streams-") as tmp:
        folder = Path(tmp)
        server = embedded.acquire(folder / "home")
        children: list[Child] = []
        try:
            with psycopg.connect(server.url(), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {APP_DATABASE}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("TICKETIQ_")}
            env.update({"TICKETIQ_DATABASE_URL": server.url(APP_DATABASE), "TICKETIQ_HOME": str(folder / "home"),
                        "TICKETIQ_SEAL_KEYS": "bench:streams-secret"})  # fmt: skip
            cli = [sys.executable, "-m", "ticketiq.cli", "tokens", "create", "--name", "ops", "--role", "admin"]
            admin = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=120, check=True).stdout.strip()
            auth = {"Authorization": f"Bearer {admin}"}
            standins = start_standins(env, folder, "--model-latency-ms", "5")
            children.append(standins)
            env.update(standins.env)
            if args.serve_pythonpath:
                env["PYTHONPATH"] = str(args.serve_pythonpath.resolve() / "src")
            app, base = start_serve(env, folder, name="app")
            children.append(app)
            with httpx.Client(base_url=base, timeout=30.0, headers=auth) as client:
                made = [client.post("/v1/tokens", json={"name": f"caller-{n}", "role": "caller"})
                        for n in range(args.tokens)]  # fmt: skip
                tokens = [m.raise_for_status().json()["token"] for m in made]
                runs = waiting_runs(client, tokens)
            out |= asyncio.run(measure(base, auth, app, runs, tokens, args.streams, args.hold_s))
        finally:
            for child in reversed(children):
                child.stop()
            embedded.stop(server.home)
    out["machine_after"] = machine()
    print(f"\nmachine: {json.dumps(out['machine_after'])}; load before: {out['machine_before']['load']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")


async def measure(
    base: str, auth: dict[str, str], app: Child, runs: list[str], tokens: list[str], streams: int, hold_s: float
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    baseline = Probe(base, auth).start()
    await asyncio.sleep(5.0)
    out["baseline"] = (await asyncio.to_thread(baseline.stop)).figures()
    print("no stream open:", json.dumps(out["baseline"]), flush=True)
    out["one_token"] = await phase("one token", base, auth, app, [(runs[0], tokens[0])] * streams, hold_s)
    each = max(1, streams // len(tokens))
    spread = [(r, t) for r, t in zip(runs, tokens, strict=True) for _ in range(each)]

    async def give_inputs() -> dict[str, Any]:
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=base, timeout=30.0) as client:
            for run_id, token in zip(runs, tokens, strict=True):
                bearer = {"Authorization": f"Bearer {token}"}
                run = (await client.get(f"/v1/runs/{run_id}", headers=bearer)).json()
                question = run["waiting_for"]["question_id"]
                await client.post(f"/v1/runs/{run_id}/input", headers=bearer,
                                  json={"text": "staging", "question_id": question})  # fmt: skip
            while True:
                done = (await client.get("/v1/runs", params={"status": "succeeded", "limit": 500},
                                         headers=auth)).json()["runs"]  # fmt: skip
                if len(done) >= len(runs) or time.monotonic() - started > 120:
                    break
                await asyncio.sleep(0.25)
        return {"runs_given_input": len(runs), "all_ended_in_s": round(time.monotonic() - started, 2)}

    out["several_tokens"] = await phase(f"{len(tokens)} tokens", base, auth, app, spread, hold_s, give_inputs)
    return out


if __name__ == "__main__":
    main()
