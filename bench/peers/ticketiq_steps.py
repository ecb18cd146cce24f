"""TicketIQ's side of the side-by-side bench: the engine in this process, on the in-process model and
tool of `bench/inprocess.py`, as `bench/step_overhead.py` drives it (an app process that does not lead,
its lease renewed hourly so only the runs' own statements fall in their time). A run is created and
taken in one statement (`create_run(take=True)`, as the API makes a run it drives at once) and awaited
to its end: `--steps` read calls, then the answer.

The model is `measure.reply`, the same function the peers' models are, its answer handed over as the
`ModelReply` our model client makes of a reply (`ParityModel`): the peers' models return that dict
and parse nothing, so neither does ours. The parse of a real reply's bytes is measured on its own by
`bench/model_client.py`; `--parse` puts it back here (the stand-in's scripted model and
`wire.reply_from_body` on every step, `bench/inprocess.py`'s `InProcessModel`).

Once the process has started, what start-up made is frozen for the garbage collector and the young
generation collected rarely (`runtime/interpreter.freeze_start_up`), as `ticketiq serve` does once its
app has started: the engine's process as it runs. Unfrozen, one full collection of the ~225,000 objects
start-up leaves took 165 ms of a 300-run round's 1.84 s of CPU (`gc.callbacks`, 2 cores). `--thawed` runs
it as a bare interpreter would."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson
import yaml

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))  # the repository, for step_overhead's imports of tests.support

from measure import arguments, database_url, measure_async, reply, report  # noqa: E402

from inprocess import Clock  # noqa: E402
from step_overhead import bench_process  # noqa: E402
from ticketiq.model.wire import ModelReply, ToolCallRequest  # noqa: E402
from ticketiq.runtime import interpreter  # noqa: E402
from ticketiq.storage.migrate import migrate  # noqa: E402


class ParityModel:
    """`measure.reply` at the run's turn (its assistant messages so far), as a `ModelReply`: what the
    peers' model steps return, in the form our driver takes from its model client."""

    def __init__(self, steps: int, tool: str = "bench_read") -> None:
        self.steps = steps
        self.tool = tool  # bench_write (`--write`): the same call to the instant write

    async def complete(self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        answer = reply(turn, self.steps, "OPS")
        calls = answer.get("calls")
        if not isinstance(calls, list):
            text = str(answer["text"])
            return ModelReply(text, [], {"role": "assistant", "content": text}, 0, 0, 0.0)
        wire = [
            {"id": c["id"], "type": "function",
             "function": {"name": self.tool, "arguments": orjson.dumps(c["arguments"]).decode()}}
            for c in calls
        ]  # fmt: skip
        message = {"role": "assistant", "content": None, "tool_calls": wire}
        asked = [ToolCallRequest(c["id"], self.tool, dict(c["arguments"])) for c in calls]
        return ModelReply(None, asked, message, 0, 0, 0.0)


def write_agent(folder: Path, steps: int, tool: str) -> None:
    read = {"calls": [{"tool": tool, "arguments": {"note": "{jira_key}"}}]}
    (folder / "scripts").mkdir()
    (folder / "scripts" / "reads.yaml").write_text(yaml.safe_dump({"steps": [read] * steps + [{"text": "done"}]}))
    agent = {"model": "reads", "system_prompt": "bench", "owner": "bench", "tools": [tool]}
    (folder / "agents.yaml").write_text(yaml.safe_dump({"agents": {"reads": agent}}))


def version() -> str:
    found = subprocess.run(["git", "-C", str(BENCH), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"commit {found.stdout.strip() or '?'}"


async def main() -> None:
    import psycopg

    # --parse: the real reply's parse on every step, beside the peers' bare dict. --write: each step's call
    # is the instant write (its in-doubt mark and outcome, I2), to profile a writing step; not the peers' work.
    # --thawed: the collector left as a bare interpreter has it, not as `ticketiq serve` sets it.
    parse, write, thawed = "--parse" in sys.argv, "--write" in sys.argv, "--thawed" in sys.argv
    sys.argv = [a for a in sys.argv if a not in ("--parse", "--write", "--thawed")]
    tool = "bench_write" if write else "bench_read"
    args = arguments(__doc__)
    url = database_url()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
        await migrate(conn)
    with tempfile.TemporaryDirectory(prefix="ticketiq-peers-") as tmp:
        folder = Path(tmp)
        write_agent(folder, args.steps, tool)
        process = await bench_process(url, folder, Clock(), lease_renew_s=3600)
        if not parse:
            process.engine.deps.model = ParityModel(args.steps, tool)
        if not thawed:
            interpreter.freeze_start_up()  # as `ticketiq serve` does once its process has started
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
