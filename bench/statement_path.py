"""What one statement costs the process that sends it, by the path it takes: a committed single-row UPDATE
of a 2 KB text, as a step's checkpoint is, on one embedded Postgres (fsync on).

    .venv/bin/python bench/statement_path.py [--statements 3000] [--rounds 3]

Side by side, in alternating rounds on one server, CPU ms a statement (getrusage of this process) and
wall ms a statement:
- `Database.execute`: our pool and `storage/lean.py`, as a checkpoint goes;
- `lean, held`: the same with one connection held (no pool checkout), what the pool adds;
- `psycopg cursor`: psycopg's async `AsyncConnection.execute` on a held connection, prepared, the path
  `Database.execute` took before lean.py;
- `psycopg sync`: psycopg's blocking `Connection.execute`, the floor `make bench-step` uses.
It prints the cores beside the figures and asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psycopg
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from ticketiq.dbserver import embedded
from ticketiq.storage import database, lean, queries
from ticketiq.storage.database import Database

UPDATE = "UPDATE bench_rows SET v = v + 1, body = %(body)s WHERE id = %(id)s"
BODY = "x" * 2048
queries.QUERIES["bench.update"] = UPDATE  # a named statement like any other, for this process only


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def timed(n: int, one: Callable[[], Awaitable[object]]) -> tuple[float, float]:
    for _ in range(min(200, n)):
        await one()  # prepared, warm
    cpu, wall = cpu_s(), time.perf_counter()
    for _ in range(n):
        await one()
    return (cpu_s() - cpu) / n * 1e3, (time.perf_counter() - wall) / n * 1e3


async def pooled(url: str, n: int) -> tuple[float, float]:
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    try:
        return await timed(n, lambda: db.execute("bench.update", {"body": BODY, "id": 1}))
    finally:
        await db.close()


async def held(url: str, n: int) -> tuple[float, float]:
    db = Database(url, min_size=1, max_size=2)
    await db.open()
    conn = await db.pool.getconn()
    statement = database.positional("bench.update")
    try:
        params = {"body": BODY, "id": 1}
        # What Database.execute does within its borrowed connection: the bound around lean's exchange.
        return await timed(n, lambda: database._bounded(
            conn, "bench.update", db.within_s,
            lambda: lean.execute(conn, "bench.update", statement, database._adapt(params)),
        ))  # fmt: skip
    finally:
        await db.pool.putconn(conn)
        await db.close()


async def cursor(url: str, n: int) -> tuple[float, float]:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, prepare_threshold=0) as conn:
        return await timed(n, lambda: conn.execute(UPDATE, {"body": BODY, "id": 1}))


def blocking(url: str, n: int) -> tuple[float, float]:
    with psycopg.connect(url, autocommit=True, prepare_threshold=0) as conn:
        for _ in range(min(200, n)):
            conn.execute(UPDATE, {"body": BODY, "id": 1})
        cpu, wall = cpu_s(), time.perf_counter()
        for _ in range(n):
            conn.execute(UPDATE, {"body": BODY, "id": 1})
        return (cpu_s() - cpu) / n * 1e3, (time.perf_counter() - wall) / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    paths: dict[str, Callable[[str, int], tuple[float, float]]] = {
        "Database.execute": lambda url, n: uvloop.run(pooled(url, n)),
        "lean, held": lambda url, n: uvloop.run(held(url, n)),
        "psycopg cursor": lambda url, n: uvloop.run(cursor(url, n)),
        "psycopg sync": blocking,
    }
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in paths}
    with tempfile.TemporaryDirectory(prefix="ticketiq-statement-") as tmp:
        server = embedded.acquire(Path(tmp) / "home")
        try:
            url = server.url()
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE TABLE bench_rows (id int PRIMARY KEY, v int NOT NULL, body text NOT NULL)")
                conn.execute("INSERT INTO bench_rows VALUES (1, 0, '')")
            for n in range(args.rounds):
                names = list(paths)
                for name in names[n % len(names) :] + names[: n % len(names)]:
                    found[name].append(paths[name](url, args.statements))
        finally:
            embedded.stop(server.home)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{args.statements} committed UPDATEs of a 2 KB text a round, {args.rounds} rounds, {cores} cores")
    print("| path | CPU ms a statement | wall ms a statement |")
    print("| --- | --- | --- |")
    for name, figures in found.items():
        cpu = ", ".join(f"{c:.3f}" for c, _ in figures)
        wall = ", ".join(f"{w:.3f}" for _, w in figures)
        print(f"| {name} | {cpu} | {wall} |")


if __name__ == "__main__":
    main()
