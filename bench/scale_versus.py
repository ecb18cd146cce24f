"""`bench/scale.py`'s app CPU a run, this tree beside an earlier commit (issue 37: d7c25d5), in one run.

    .venv/bin/python bench/scale_versus.py [--baseline d7c25d5] [--runs 300] [--rounds 3]

Each side runs its own `bench/scale.py --processes 1 --parts throughput --runs R --json F`: the earlier
commit from a git worktree with a venv of its own (`bench/baseline.py`, made once and kept), this tree
on this interpreter. The sides alternate, the first changing each round, so neither always runs on a
quieter machine. It prints each round's app CPU a run (ms), runs per second and statements a run, the
ratio of this tree to the baseline within each round and over all of them, and the cores. It asserts
nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent
sys.path.insert(0, str(HERE))

from baseline import prepare  # noqa: E402


def one_side(tree: Path, python: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """The 1-process throughput figures of `tree`'s scale.py, run by `python`."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-versus-") as tmp:
        out = Path(tmp) / "scale.json"
        command = [str(python), str(tree / "bench" / "scale.py"), "--processes", "1", "--parts", "throughput",
                   "--runs", str(runs), "--json", str(out)]  # fmt: skip
        done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not out.exists():
            tail = "\n    ".join(done.stderr.strip().splitlines()[-8:])
            raise SystemExit(f"{tree}: bench/scale.py failed ({done.returncode}):\n    {tail}")
        figures: dict[str, Any] = json.loads(out.read_text())["throughput"][0]
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="d7c25d5", help="the earlier commit")
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    base = prepare(REPOSITORY, args.baseline)
    here_env = {**os.environ, "PYTHONPATH": str(REPOSITORY / "src")}
    sides = {
        args.baseline: (base.tree, base.python, base.env(os.environ)),
        "this tree": (REPOSITORY, Path(sys.executable), here_env),
    }
    found: list[dict[str, dict[str, Any]]] = []
    for n in range(args.rounds):
        order = list(sides) if n % 2 == 0 else list(reversed(sides))
        found.append({name: one_side(*sides[name], args.runs) for name in order})
        line = ", ".join(
            f"{name}: {f['app_cpu_ms_per_run']} ms a run, {f['runs_per_s']} runs/s, {f['statements_per_run']} "
            f"statements a run" for name, f in found[-1].items()
        )  # fmt: skip
        ratio = found[-1]["this tree"]["app_cpu_ms_per_run"] / found[-1][args.baseline]["app_cpu_ms_per_run"]
        print(f"round {n + 1}: {line}; ratio {ratio:.3f}x", flush=True)
    total = {name: sum(r[name]["app_cpu_ms_per_run"] for r in found) for name in sides}
    ours, theirs = total["this tree"], total[args.baseline]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(
        f"bench/scale.py --processes 1 --parts throughput --runs {args.runs}, {args.rounds} rounds, {cores} cores: "
        f"app CPU a run {ours / args.rounds:.2f} ms (this tree) against {theirs / args.rounds:.2f} ms "
        f"({args.baseline}): {ours / theirs:.3f}x"
    )


if __name__ == "__main__":
    main()
