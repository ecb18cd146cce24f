"""What every system's process of the side-by-side bench measures, and how it reports it (`step_bench.py`).

A system's process is handed its own fresh database in `PEERS_DATABASE_URL` (the environment, so the
password is never on a command line) and `--runs`, `--steps`, `--warmup`. It makes its warm-up runs,
then measures the runs that count: wall and client CPU (getrusage of the whole process, every thread
of it, so a peer's background threads are in its bill) around them, and the top-level statements its
database ran in that time (`pg_stat_statements`, reset after the warm-up; the bench's own reads of it
left out). It prints one JSON line, the last of its output, that the bench reads.

Only the standard library and psycopg are used here: both the repository's venv and the peers' have
them, and this file is imported by the systems' processes of both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass

import psycopg

URL_VARIABLE = "PEERS_DATABASE_URL"


@dataclass(frozen=True)
class Measured:
    """One system's measured runs: totals, divided by the steps by the bench."""

    system: str
    version: str
    runs: int
    steps_per_run: int
    wall_s: float
    cpu_s: float
    statements: int


def arguments(description: str | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=10)
    return parser.parse_args()


def database_url() -> str:
    return os.environ[URL_VARIABLE]


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def reset_statements(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_stat_statements_reset(0::oid, "
            "(SELECT oid FROM pg_database WHERE datname = current_database()), 0::bigint)"
        )


def statements(url: str) -> int:
    """Top-level statements this database ran since the reset, the bench's own reads of the view left out."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements "
            "WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND query !~* 'pg_stat_statements'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def measure(system: str, version: str, url: str, runs: int, steps: int, run: Callable[[int], None]) -> Measured:
    """`run(i)` makes run i whole (created, driven to its end) and returns when it has ended."""
    reset_statements(url)
    cpu_before, started = cpu_s(), time.perf_counter()
    for i in range(runs):
        run(i)
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu_before
    return Measured(system, version, runs, steps, wall, cpu, statements(url))


async def measure_async(
    system: str, version: str, url: str, runs: int, steps: int, run: Callable[[int], Awaitable[None]]
) -> Measured:
    """`measure` for a system driven from an event loop."""
    reset_statements(url)
    cpu_before, started = cpu_s(), time.perf_counter()
    for i in range(runs):
        await run(i)
    wall, cpu = time.perf_counter() - started, cpu_s() - cpu_before
    return Measured(system, version, runs, steps, wall, cpu, statements(url))


def report(measured: Measured) -> None:
    print(json.dumps(asdict(measured)), flush=True)


def reply(turn: int, steps: int, note: str) -> dict[str, object]:
    """The scripted model's answer at a turn, the same for every system: a read call for each of the
    first `steps` turns, then text."""
    if turn < steps:
        return {"calls": [{"tool": "bench_read", "arguments": {"note": note}, "id": f"call-{turn}"}]}
    return {"text": "done"}


def read(note: str) -> dict[str, object]:
    """The instant read, the same for every system."""
    return {"note": note}
