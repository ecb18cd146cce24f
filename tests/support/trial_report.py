"""What the kill trials show while they run (a `rich` progress bar with a running tally) and leave behind
in `results/` (git-ignored): a summary table and one by kind, `kill-trials-<mode>.json` and a histogram
of recovery times, `kill-trials-<mode>.png` (matplotlib). `make evidence` reads the JSON and the image.
A mix other than the default (LIYAGENT_KILL_MIX) writes `kill-trials-<mode>-<kinds>.json` and `.png`,
so it never replaces the default mix's evidence."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tests.support.trials import RECOVERY_LIMIT_S, Tally, default_mix

# LIYAGENT_KILL_RESULTS (or TICKETIQ_KILL_RESULTS) names another folder: `make test`'s smoke writes there,
# so that its 3 rounds never replace the published runs' files that `make evidence` renders.
_ELSEWHERE = os.environ.get("LIYAGENT_KILL_RESULTS") or os.environ.get("TICKETIQ_KILL_RESULTS")
RESULTS = Path(_ELSEWHERE) if _ELSEWHERE else Path(__file__).resolve().parents[2] / "results"


def tally_line(t: Tally) -> str:
    return (f"trials {t.trials} · in flight {t.in_flight} · lost {t.lost} · duplicates {t.duplicates} · "
            f"slowest {t.slowest:.2f} s")  # fmt: skip


class Live:
    """The progress bar and the running tally, on the terminal even while pytest captures output."""

    def __init__(self, console: Console, mode: str, rounds: int) -> None:
        self.progress = Progress(
            TextColumn(f"[bold]kill trials ({mode})"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=console, transient=False,
        )  # fmt: skip
        self.task = self.progress.add_task("", total=rounds)

    def __enter__(self) -> Live:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def advance(self, tally: Tally) -> None:
        self.progress.update(self.task, advance=1, description=tally_line(tally))


def summary_table(tally: Tally, mode: str, seed: int) -> Table:
    s = tally.summary()
    table = Table(title=f"kill trials, mode {mode}, seed {seed}")
    for column in ("rounds", "trials", "caught in flight", "lost", "duplicates", "p50 s", "p95 s", "p99 s", "max s"):
        table.add_column(column, justify="right")
    table.add_row(
        str(tally.rounds), str(tally.trials), f"{tally.in_flight} ({tally.rounds_in_flight} rounds)", str(tally.lost),
        str(tally.duplicates), f"{s['p50']:.2f}", f"{s['p95']:.2f}", f"{s['p99']:.2f}", f"{s['max']:.2f}",
    )  # fmt: skip
    return table


def kinds_table(tally: Tally) -> Table:
    """Per kind: trials, caught in flight, lost, duplicates and its recoveries."""
    table = Table(title="by kind")
    for column in ("kind", "trials", "caught in flight", "lost", "duplicates", "p50 s", "p95 s", "max s"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    recovery = tally.recovery_by_kind()
    for kind, n in tally.by_kind().items():
        r = recovery[kind]
        table.add_row(kind, str(n["trials"]), str(n["in_flight"]), str(n["lost"]), str(n["duplicates"]),
                      f"{r['p50']:.2f}", f"{r['p95']:.2f}", f"{r['max']:.2f}")  # fmt: skip
    return table


def result_name(mode: str, mix: tuple[str, ...] | None = None) -> str:
    """The result files' name: `kill-trials-<mode>`, with the kinds when the mix is not the mode's default."""
    mix = tuple(mix) if mix is not None else default_mix(mode)
    return f"kill-trials-{mode}" if mix == default_mix(mode) else f"kill-trials-{mode}-{'-'.join(mix)}"


def result(
    tally: Tally, mode: str, seed: int, command: str, started: datetime, elapsed_s: float,
    mix: tuple[str, ...] | None = None,
) -> dict[str, Any]:  # fmt: skip
    mix = tuple(mix) if mix is not None else default_mix(mode)
    return {
        "mode": mode, "mix": list(mix), "seed": seed, "rounds": tally.rounds, "trials": tally.trials,
        "in_flight": tally.in_flight, "rounds_in_flight": tally.rounds_in_flight, "lost": tally.lost,
        "duplicates": tally.duplicates,
        "recovery_s": [round(r, 3) for r in tally.recoveries], "recovery": tally.summary(),
        "recovery_limit_s": RECOVERY_LIMIT_S, "started_at": started.isoformat(), "elapsed_s": round(elapsed_s, 1),
        "passed": tally.passed, "command": command, "commit": _commit(),
        "histogram": f"results/{result_name(mode, tuple(mix))}.png", "by_kind": tally.by_kind(),
        "recovery_by_kind": tally.recovery_by_kind(), "failures": tally.failures, "extra": tally.extra,
    }  # fmt: skip


def write(outcome: dict[str, Any], tally: Tally, results: Path = RESULTS) -> Path:
    """The JSON result and the histogram, side by side in `results`; returns the JSON's path."""
    results.mkdir(parents=True, exist_ok=True)
    mode = outcome["mode"]
    name = result_name(mode, tuple(outcome.get("mix") or default_mix(mode)))
    path = results / f"{name}.json"
    path.write_text(json.dumps(outcome, indent=2) + "\n")
    histogram(tally.recoveries, mode, results / f"{name}.png")
    return path


def histogram(recoveries: list[float], mode: str, path: Path) -> None:
    # Imported here: every test worker imports this module at collection, and matplotlib is a second of it.
    import matplotlib

    matplotlib.use("Agg")  # no display: write files only
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 3.5), dpi=110)
    if recoveries:
        axes.hist(recoveries, bins=min(40, max(5, len(recoveries) // 5)), color="#3b6ea5", edgecolor="white")
    axes.axvline(RECOVERY_LIMIT_S, color="#b03030", linestyle="--", label=f"target {RECOVERY_LIMIT_S:g} s")
    axes.set_xlabel("recovery: event to the trial's end (s)")
    axes.set_ylabel("trials caught in flight")
    axes.set_title(f"kill trials ({mode}): {len(recoveries)} recoveries")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _commit() -> str:
    try:
        made = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=Path(__file__).parent)  # fmt: skip
    except OSError:
        return "unknown"
    return made.stdout.strip() or "unknown"


def now() -> datetime:
    return datetime.now(UTC)
