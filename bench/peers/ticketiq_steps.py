"""TicketIQ's side of the side-by-side bench: the engine in this process, on the in-process model and
tool of `bench/inprocess.py`, as `bench/step_overhead.py` drives it (an app process that does not lead,
its lease renewed hourly so only the runs' own statements fall in their time). A run is created and
taken in one statement (`create_run(take=True)`, as the API makes a run it drives at once) and awaited
to its end: `--steps` read calls, then the answer.

The model here answers as a model server does, its reply's bytes read as the client reads them
(`InProcessModel`); the peers' models return a dict. That work is in TicketIQ's bill and not theirs."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))  # the repository, for step_overhead's imports of tests.support

from measure import arguments, database_url, measure_async, report  # noqa: E402

from inprocess import Clock  # noqa: E402
from step_overhead import bench_process  # noqa: E402
from ticketiq.storage.migrate import migrate  # noqa: E402


def write_agent(folder: Path, steps: int) -> None:
    read = {"calls": [{"tool": "bench_read", "arguments": {"note": "{jira_key}"}}]}
    (folder / "scripts").mkdir()
    (folder / "scripts" / "reads.yaml").write_text(yaml.safe_dump({"steps": [read] * steps + [{"text": "done"}]}))
    agent = {"model": "reads", "system_prompt": "bench", "owner": "bench", "tools": ["bench_read"]}
    (folder / "agents.yaml").write_text(yaml.safe_dump({"agents": {"reads": agent}}))


def version() -> str:
    found = subprocess.run(["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"commit {found.stdout.strip() or '?'}"


async def main() -> None:
    import psycopg

    args = arguments(__doc__)
    url = database_url()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        await migrate(conn)
    with tempfile.TemporaryDirectory(prefix="ticketiq-peers-") as tmp:
        folder = Path(tmp)
        write_agent(folder, args.steps)
        process = await bench_process(url, folder, Clock(), lease_renew_s=3600)
        try:
            agent = process.engine.deps.catalog.get("reads")
            assert agent is not None

            async def run(i: int) -> None:
                created = await process.engine.create_run(agent, f"bench OPS-{i}", take=True)
                assert await process.engine.tasks[created.id] == "succeeded"

            for i in range(args.warmup):
                await run(i)
            report(await measure_async("TicketIQ", version(), url, args.runs, args.steps, run))
        finally:
            await process.stop()


if __name__ == "__main__":
    import uvloop

    uvloop.run(main())  # the event loop `ticketiq serve` runs on
