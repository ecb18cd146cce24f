"""`make mutants` (python -m tests.mutants): every fence mutant and every durable mutant, one at a time,
against its guard tests.

For each fenced statement of queries/*.sql and each fenced SQL function of the migrations (its last
definition), tests/support/fence_rules.py makes the mutants: the attempt conjunct dropped (`true`), the
attempt conjunct made `(... OR true)`, the row lock on the fence row dropped, and the job fence's
`status = 'running'` dropped. For each found-it statement (I20), tests/support/durable_rules.py drops its
durable() call (`true`), and weakens durable() itself (an id alone; a message that is not transactional).
Each mutant is applied
to a copy of src/ (never the working tree: others run tests from it meanwhile), and the tests that guard
its statement (guards.py) run with PYTHONPATH pointing at the copy first, so the test process, the
template database it migrates, and any subprocess it starts import the mutated package. A mutant is
killed when a guard test fails. Prints a table; exits 1 when a mutant survived, a guard is missing, or
the guards fail on the unmutated copy.

MUTANTS_JOBS (default 2) mutants run at once, each in a copy of its own; MUTANTS_ONLY=<substring> runs
the mutants whose statement, kind or place (`<statement>:<kind>:<offset>`) contains it (`not_durable`,
`fn:durable`: the durable mutants alone).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.mutants.conditions import declared_mutants
from tests.mutants.guards import GUARDS
from tests.support.durable_rules import durable_mutants, judge_durable
from tests.support.fence_rules import Mutant, all_mutants, judge_mutant

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Verdict:
    mutant: Mutant
    static: bool  # the static check (tests/unit/test_statement_fences.py) refuses it too
    outcome: str  # killed, survived, error
    by: str  # the test that killed it, or what went wrong
    seconds: float


def pytest_args(tests: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:randomly", "-p", "no:cacheprovider",
            "--timeout", "180", "-rfE", *tests]  # fmt: skip


class Copy:
    """A copy of src/ that one mutant at a time is applied to."""

    def __init__(self, base: Path) -> None:
        self.src = base / "src"
        shutil.copytree(SRC, self.src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(self.src), os.environ.get("PYTHONPATH", "")])}
        # The test process and the subprocesses it starts (`python -m ticketiq.cli`, as tests/support/
        # cluster.py and operate/launch.py start them) inherit this environment: they import the copy, not
        # the checkout's editable install, and the copy's SQL files are the ones loaded and migrated.
        probe = [sys.executable, "-c", "import ticketiq.storage.queries as q, ticketiq.storage.migrate as m; "
                 "print(q.__file__); print(m.__file__)"]  # fmt: skip
        shown = subprocess.run(probe, env=self.env, cwd=ROOT, capture_output=True, text=True, check=True)
        for line in shown.stdout.split():
            assert line.startswith(str(self.src)), f"a subprocess of the tests imports {line}, not the copy"

    def where(self, path: Path) -> Path:
        return self.src / path.relative_to(SRC)

    def run(self, tests: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(pytest_args(tests), env=self.env, cwd=ROOT, capture_output=True, text=True,
                              check=False)  # fmt: skip

    def judge(self, mutant: Mutant) -> Verdict:
        target = self.where(mutant.path)
        original = target.read_text()
        target.write_text(mutant.apply(original))
        started = time.monotonic()
        try:
            done = self.run(guards_of(mutant))
        finally:
            target.write_text(original)
        took = time.monotonic() - started
        if mutant.key in DECLARED:
            static = False  # a hand-declared condition: no static rule reads it
        else:
            static = bool(judge_durable(mutant) if mutant in durable_mutants() else judge_mutant(mutant))
        failed = _FAILED.findall(done.stdout)
        if done.returncode == 1 and failed:
            return Verdict(mutant, static, "killed", failed[0].split("/")[-1], took)
        if done.returncode == 0:
            return Verdict(mutant, static, "survived", "", took)
        return Verdict(mutant, static, "error", f"pytest exited {done.returncode}: {done.stdout[-300:]!r}", took)


# Hand-declared condition mutants (conditions.py) carry their own guards.
DECLARED = {mutant.key: guards for mutant, guards in declared_mutants()}


def guards_of(mutant: Mutant) -> list[str]:
    return DECLARED.get(mutant.key) or GUARDS[mutant.target]


def table(verdicts: list[Verdict]) -> str:
    rows = [("statement", "mutant", "changed", "static check", "behaviour", "killed by")]
    for v in verdicts:
        changed = f"{v.mutant.original!r} -> {v.mutant.replacement!r}"
        rows.append((v.mutant.target, v.mutant.kind, changed, "refused" if v.static else "passed", v.outcome, v.by))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> int:
    only = os.environ.get("MUTANTS_ONLY", "")
    every = [*all_mutants(), *durable_mutants(), *(m for m, _ in declared_mutants())]
    mutants = [m for m in every if only in m.key]
    unguarded = sorted({m.target for m in mutants if m.key not in DECLARED} - set(GUARDS))
    if unguarded:
        print(f"no guard tests declared (tests/mutants/guards.py) for: {', '.join(unguarded)}")
        return 1
    jobs = max(1, int(os.environ.get("MUTANTS_JOBS", "2")))
    print(f"{len(mutants)} mutants of {len({m.target for m in mutants})} fenced or found-it statements and functions, "
          f"{jobs} at a time")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="ticketiq-mutants-") as tmp:
        copies = [Copy(Path(tmp) / f"copy{i}") for i in range(jobs)]
        baseline = copies[0].run(sorted({t for m in mutants for t in guards_of(m)}))
        if baseline.returncode != 0:
            print("the guard tests fail on the unmutated copy:\n" + baseline.stdout[-3000:])
            return 1
        print("the guard tests pass on the unmutated copy")
        pending = list(mutants)

        def worker(copy: Copy) -> list[Verdict]:
            out = []
            while pending:
                try:
                    mutant = pending.pop(0)
                except IndexError:
                    break
                verdict = copy.judge(mutant)
                print(f"  {verdict.outcome:8} {mutant.target} {mutant.kind} ({verdict.seconds:.0f} s)", flush=True)
                out.append(verdict)
            return out

        with ThreadPoolExecutor(jobs) as pool:
            verdicts = [v for part in pool.map(worker, copies) for v in part]
    order = {m.key: i for i, m in enumerate(mutants)}
    verdicts.sort(key=lambda v: order[v.mutant.key])
    print()
    print(table(verdicts))
    bad = [v for v in verdicts if v.outcome != "killed"]
    print(f"\n{len(verdicts) - len(bad)} of {len(verdicts)} mutants killed"
          + (f"; not killed: {', '.join(v.mutant.key for v in bad)}" if bad else ""))  # fmt: skip
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
