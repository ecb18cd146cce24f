"""DBOS's side of the side-by-side bench: the model and the tool each a `@DBOS.step` in a
`@DBOS.workflow`, on DBOS's system database (the one handed to this process). A run is one call of
the workflow function, which starts the workflow (its row written) and runs it here to its end.

Runs on the peers' venv (`bench/peers/requirements.txt`), not the repository's."""

# mypy: disable-error-code="untyped-decorator"
# (DBOS is not installed where mypy runs: its decorators are Any there.)

from __future__ import annotations

from importlib.metadata import version

from dbos import DBOS, DBOSConfig
from measure import arguments, database_url, measure, read, reply, report


def main() -> None:
    args = arguments(__doc__)
    url = database_url()
    config: DBOSConfig = {"name": "peers-bench", "system_database_url": url, "log_level": "WARNING"}
    DBOS(config=config)

    @DBOS.step()
    def model(turn: int, note: str) -> dict[str, object]:
        return reply(turn, args.steps, note)

    @DBOS.step()
    def bench_read(note: str) -> dict[str, object]:
        return read(note)

    @DBOS.workflow()
    def agent(task: str) -> str:
        messages: list[object] = [task]
        for turn in range(args.steps + 1):
            answer = model(turn, task)
            messages.append(answer)
            calls = answer.get("calls")
            if not isinstance(calls, list):
                return str(answer["text"])
            for call in calls:
                messages.append(bench_read(call["arguments"]["note"]))
        return "out of turns"

    DBOS.launch()
    try:

        def run(i: int) -> None:
            assert agent(f"OPS-{i}") == "done"

        for i in range(args.warmup):
            run(i)
        report(measure("DBOS", version("dbos"), url, args.runs, args.steps, run))
    finally:
        DBOS.destroy()


if __name__ == "__main__":
    main()
