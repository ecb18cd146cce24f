"""What waiting costs a process: its memory before and after 10,000 runs went waiting for input.

    make bench-waiting
    .venv/bin/python bench/waiting.py [--runs 10000] [--batch 500] [--resume 200]

One app process (no leader) on an in-process model: every run's first step asks a person for input
(the built-in `request_input`), so each run writes its checkpoint, ends `waiting` and releases its
lease. The bench prints the process's RSS and the Python heap still allocated (tracemalloc) before
the runs were started and after all of them went waiting (target: the same, give or take the
allocator's arenas), the drivers and leases still held (target 0), and the peak while they ran. Then
it gives input to a few of them and shows they go on and succeed.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil
import psycopg
import yaml

sys.path.insert(0, str(Path(__file__).parent))

from inprocess import Clock, InProcessModel, bench_database, fast_tools
from ticketiq.engine import questions
from ticketiq.process import AppProcess
from ticketiq.settings import Settings

MIB = 1024 * 1024


def files(folder: Path) -> None:
    ask = {"calls": [{"tool": "request_input", "arguments": {"question": "Which environment for {jira_key}?"}}]}
    (folder / "scripts").mkdir()
    (folder / "scripts" / "asks.yaml").write_text(
        yaml.safe_dump({"steps": [ask, {"text": "noted {jira_key} for {result:request_input.input|none}"}]})
    )
    agents = {"agents": {"asks": {"model": "asks", "system_prompt": "bench", "owner": "bench", "may_wait": True,
                                  "tools": ["bench_read"]}}}  # fmt: skip
    (folder / "agents.yaml").write_text(yaml.safe_dump(agents))


def memory() -> tuple[float, float]:
    """(RSS, Python heap still allocated) in MiB, after a full collection."""
    gc.collect()
    return psutil.Process().memory_info().rss / MIB, tracemalloc.get_traced_memory()[0] / MIB


async def waiting_part(url: str, folder: Path, runs: int, batch: int, resume: int, top: int) -> None:
    settings = Settings(
        home=folder, database_url=url, agents=folder / "agents.yaml", seal_keys="bench:bench-secret", lead=False
    )
    clock = Clock()
    process = await AppProcess.start(settings, extra_tools=fast_tools(clock))
    process.engine.deps.model = InProcessModel(folder / "scripts", clock)
    engine = process.engine
    try:
        agent = engine.deps.catalog.get("asks")
        assert agent is not None
        ids = [(await engine.create_run(agent, f"bench OPS-{i}")).id for i in range(runs)]
        # A few runs first, so what every run needs once (code paths, caches, pooled connections) is
        # warm before the baseline is read.
        for run_id in ids[:batch]:
            assert await engine.start(run_id)
        await asyncio.gather(*[asyncio.shield(t) for t in list(engine.tasks.values())])
        clock.model_calls.clear()
        clock.tool_calls.clear()
        rss_before, heap_before = memory()
        baseline = tracemalloc.take_snapshot() if top else None
        peak = rss_before
        started = time.monotonic()
        for at in range(batch, runs, batch):
            for run_id in ids[at : at + batch]:
                assert await engine.start(run_id)
            peak = max(peak, psutil.Process().memory_info().rss / MIB)
            await asyncio.gather(*[asyncio.shield(t) for t in list(engine.tasks.values())])
            clock.model_calls.clear()  # the bench's own clock keeps a tuple a model call: not the engine's
            clock.tool_calls.clear()
        elapsed = time.monotonic() - started
        rss_after, heap_after = memory()
        if baseline is not None:
            print(f"where the Python heap grew (top {top}):")
            for stat in tracemalloc.take_snapshot().compare_to(baseline, "lineno")[:top]:
                print(f"  {stat}")
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute("SELECT status, count(*) FROM runs GROUP BY status ORDER BY status")
            by_status: dict[str, int] = dict(await cur.fetchall())
            cur = await conn.execute("SELECT count(*) FROM leases WHERE name LIKE 'checkpoint:%%'")
            row = await cur.fetchone()
            leases = int(row[0]) if row else -1
        print(f"{runs} runs asked for input in {elapsed:.1f} s (after a warm-up of {batch}); statuses: {by_status}")
        print(f"drivers held: {len(engine.drivers)}, tasks: {len(engine.tasks)}, run leases: {leases} (target 0)")
        print(f"RSS:         before {rss_before:7.1f} MiB  after {rss_after:7.1f} MiB  "
              f"delta {rss_after - rss_before:+6.1f} MiB  peak while running {peak:.1f} MiB")  # fmt: skip
        print(f"Python heap: before {heap_before:7.1f} MiB  after {heap_after:7.1f} MiB  "
              f"delta {heap_after - heap_before:+6.1f} MiB  "
              f"({(heap_after - heap_before) * MIB / max(1, runs - batch):.0f} bytes per waiting run)")  # fmt: skip
        given = 0
        for run_id in ids[:resume]:
            await engine.give_input(run_id, questions.by_key("staging", "bench", f"bench-{run_id}"))
            given += 1
        await asyncio.gather(*[asyncio.shield(t) for t in list(engine.tasks.values())])
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM runs WHERE id = ANY(%s) AND status = 'succeeded'", (ids[:resume],)
            )
            row = await cur.fetchone()
        print(f"input given to {given} of them: {row[0] if row else 0} succeeded")
    finally:
        await process.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--resume", type=int, default=200)
    parser.add_argument("--top", type=int, default=0, help="print where the Python heap grew, this many lines")
    args = parser.parse_args()
    tracemalloc.start()
    with tempfile.TemporaryDirectory(prefix="ticketiq-bench-") as tmp:
        folder = Path(tmp)
        files(folder)
        async with bench_database(folder) as url:
            await waiting_part(url, folder, args.runs, args.batch, args.resume, args.top)


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
