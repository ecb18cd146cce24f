"""The engine's own Python in a read-only step: the step overhead of bench/step_overhead.py measured
twice in one process, once as it is and once with the checkpoint statement answered by nothing, so the
second figure is what the engine computes for a step. Beside them, the budget issue 19's 1.2x goal
leaves: a fifth of one committed UPDATE of a checkpoint row, timed at the runs' pace (as
step_overhead.py times it), against which the engine's Python is set.

    .venv/bin/python bench/step_python.py [--steps 40] [--runs 10] [--profile tottime|cumtime]

Each is also split in three (medians): the model's answer to the checkpoint call, the call, and its
return to the next model request less the tool. The same Python costs about twice as much with the
statement in the step as without: after the wait for the database the CPU runs it cold. It prints
figures and asserts none. With `--profile`, cProfile of the runs with the statement left out,
sorted as asked (cProfile slows what it watches: read the order, not the times).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import itertools
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import step_overhead
from inprocess import Clock, bench_database
from ticketiq.storage.run_store import Flush, RunHandle, Sealed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--profile", choices=["tottime", "cumtime"])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ticketiq-bench-") as tmp:
        folder = Path(tmp)
        step_overhead.scripts(folder, args.steps)
        async with bench_database(folder, "pg_stat_statements") as url:
            clock = Clock()
            process = await step_overhead.bench_process(url, folder, clock, lease_renew_s=3600)
            written = RunHandle.write_checkpoint
            skipping = [False]
            statements: list[tuple[float, float]] = []  # each checkpoint's call: began, returned

            async def checkpoint(self: RunHandle, sealed: Sealed, flush: Flush | None, opening: bool = False) -> None:
                began = time.perf_counter()
                if not skipping[0] or opening:  # the attempt's first checkpoint still opens it
                    await written(self, sealed, flush, opening=opening)
                statements.append((began, time.perf_counter()))

            RunHandle.write_checkpoint = checkpoint  # type: ignore[method-assign]
            profile = cProfile.Profile()
            texts = step_overhead.CheckpointTexts(process)
            python: dict[bool, float] = {}
            gaps: list[float] = []
            try:
                agent = process.engine.deps.catalog.get("reads")
                assert agent is not None
                for skip in (False, True):
                    skipping[0] = skip
                    overheads: list[float] = []
                    parts: list[tuple[float, float, float]] = []
                    for i in range(args.runs + 2):  # two to warm up
                        created = await process.engine.create_run(agent, f"bench OPS-{i}")
                        clock.model_calls.clear()
                        clock.tool_calls.clear()
                        statements.clear()
                        if skip and args.profile and i >= 2:
                            profile.enable()
                        with texts.recording() if not skip and i == 1 else contextlib.nullcontext():
                            assert await process.engine.start(created.id)
                            assert await process.engine.tasks[created.id] == "succeeded"
                        profile.disable()
                        if i >= 2:
                            overheads += step_overhead.step_overheads(clock)
                            parts += step_parts(clock, statements)
                            if not skip:
                                gaps.append(step_overhead.step_gap(clock, statistics.median(p[1] for p in parts)))
                    what = "without its checkpoint statement" if skip else "as it is"
                    print(f"read-only step overhead {what}: median {1000 * statistics.median(overheads):.3f} ms")
                    before, statement, after = (1000 * statistics.median(p) for p in zip(*parts, strict=True))
                    print(
                        f"  its parts, medians: model answer to the checkpoint call {before:.3f} ms, the call "
                        f"{statement:.3f} ms, from its return to the next model request less the tool {after:.3f} ms"
                    )
                    python[skip] = (before + after) / 1000
                await budget(url, texts.median(), statistics.median(gaps), python)
            finally:
                RunHandle.write_checkpoint = written  # type: ignore[method-assign]
                await process.stop()
            if args.profile:
                pstats.Stats(profile).sort_stats(args.profile).print_stats(40)


async def budget(url: str, text: str, gap_s: float, python: dict[bool, float]) -> None:
    """What 1.2x of the paced UPDATE leaves for the engine's own work in a step, against its Python:
    measured hot (no statement to wait for) and as it runs after the wait."""
    probe = await step_overhead.UpdateProbe.open(url, text)
    try:
        await probe.sample(100, 0.0)  # prepared after 5, warm
        await probe.sample(400, gap_s)
    finally:
        await probe.close()
    paced = statistics.median(probe.paced)
    left = (step_overhead.OVERHEAD_TARGET - 1) * paced
    print(
        f"the UPDATE of a checkpoint row at the runs' pace: median {1000 * paced:.3f} ms; "
        f"{step_overhead.OVERHEAD_TARGET}x of it leaves {1000 * left:.3f} ms for all the engine adds to a step"
    )
    print(f"  the engine's Python in a step (before and after the call): {1000 * python[True]:.3f} ms hot, "
          f"{python[True] / left:.2f}x the budget; {1000 * python[False]:.3f} ms after the wait, "
          f"{python[False] / left:.2f}x the budget")  # fmt: skip


def step_parts(clock: Clock, statements: list[tuple[float, float]]) -> list[tuple[float, float, float]]:
    """Each read-only step's overhead in three: from the model's answer to the checkpoint call (the
    engine's Python before it: planning, gates, notes, the seal), the call (the statement through the
    run store and the pool), and from its return to the next model request less the tool's own time."""
    out = []
    for (_, answered), (asked, _) in itertools.pairwise(clock.model_calls):
        inside = [(b, r) for b, r in statements if answered <= b <= asked]
        if len(inside) != 1:
            continue  # not a read-only step's one statement
        began, returned = inside[0]
        tools = sum(e - s for s, e in clock.tool_calls if s >= returned and e <= asked)
        out.append((began - answered, returned - began, asked - returned - tools))
    return out


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())
