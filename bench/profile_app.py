"""Where an app process's CPU goes: py-spy samples of a running `ticketiq serve`, summed into shares.

    with Sampler(pid, Path("profile.txt")) as sampler:
        ...  # the work measured
    print(summary(sampler.stacks()))

py-spy reads the process from outside (ptrace): the app runs unchanged, at its own speed. Its raw format
is one line a distinct stack, frames root first separated by `;`, then the number of samples. Only
samples of a thread running Python (`--idle` off) are kept: a share is of the CPU the process used.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

RATE = 200  # samples a second: enough for shares of a few percent over a run of some seconds


def py_spy() -> str | None:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return found if Path(found).exists() else None


class Sampler:
    """py-spy recording `pid` while the block runs; the raw stacks land in `out`."""

    def __init__(self, pid: int, out: Path) -> None:
        self.pid, self.out = pid, out
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        binary = py_spy()
        if binary is None:
            raise SystemExit("py-spy is not installed: `.venv/bin/pip install -e '.[dev]'` installs it")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(self.pid), "--rate", str(RATE), "--format", "raw",
             "--output", str(self.out), "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        try:
            _, err = self.proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")

    def stacks(self) -> Counter[tuple[str, ...]]:
        return read_raw(self.out.read_text())


def read_raw(text: str) -> Counter[tuple[str, ...]]:
    out: Counter[tuple[str, ...]] = Counter()
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out[tuple(stack.split(";"))] += int(count)
    return out


def frame_name(frame: str) -> str:
    """`function (path/to/module.py:12)` as `module.function`, the path cut to its package."""
    function, _, where = frame.partition(" (")
    path = where.rsplit(":", 1)[0]
    return f"{package_of(path)}:{Path(path).stem}.{function}"


def package_of(path: str) -> str:
    """The package a frame's file belongs to: `ticketiq.engine`, `httpcore`, `psycopg`, `<stdlib>`.
    py-spy names a file by its path under its sys.path entry (`httpx/_client.py`, `asyncio/runners.py`)."""
    if path.startswith("<"):
        return "<stdlib>"  # <frozen runpy>, <string>
    parts = Path(path).parts
    top = parts[0].removesuffix(".py") if parts else "?"
    if top == "ticketiq":
        return "ticketiq." + parts[1].removesuffix(".py") if len(parts) > 2 else "ticketiq"
    return "<stdlib>" if top in sys.stdlib_module_names else top


@dataclass(frozen=True)
class Summary:
    samples: int
    functions: list[tuple[str, float]]  # the leaf frames: where the CPU was spent, share of samples
    packages: list[tuple[str, float]]  # the same samples by the leaf frame's package
    through: list[tuple[str, float]]  # samples with a frame of this package anywhere on the stack


def summary(stacks: Counter[tuple[str, ...]], top: int = 10) -> Summary:
    total = sum(stacks.values()) or 1
    leaf: Counter[str] = Counter()
    package: Counter[str] = Counter()
    through: Counter[str] = Counter()
    for stack, n in stacks.items():
        leaf[frame_name(stack[-1])] += n
        package[frame_name(stack[-1]).split(":")[0]] += n
        for name in {frame_name(f).split(":")[0] for f in stack}:
            through[name] += n

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / total, 1)) for k, v in c.most_common(top)]

    return Summary(total, share(leaf), share(package), share(through))


def print_summary(s: Summary, indent: str = "    ") -> None:
    print(f"{indent}profile: {s.samples} samples; top {len(s.functions)} functions by own time:")
    for name, pct in s.functions:
        print(f"{indent}  {pct:5.1f}%  {name}")
    print(f"{indent}by package of the running frame: " + ", ".join(f"{k} {v}%" for k, v in s.packages))
    print(f"{indent}with the package on the stack: " + ", ".join(f"{k} {v}%" for k, v in s.through))
