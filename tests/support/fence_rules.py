"""What the fences read by `fences.py` must be (I3), and the mutants that break them one at a time.

`problems` judges one statement or function: each attempt condition a top-level conjunct of the
condition that selects its row, a statement that writes about a run or a job fenced (or listed below
with why it needs no fence), and the row lock taken where a statement reads its fence before it writes.
`tests/unit/test_queries.py` asks it of every statement and function; `make mutants` (tests/mutants)
applies each of `all_mutants` to a copy of the package and runs the tests that guard it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pglast import ast
from pglast.enums.lockoptions import LockClauseStrength

from tests.support.fences import TAKES, Span, Sql, read_functions, read_queries, read_statement
from ticketiq.storage.queries import parse

# ----- judging ------------------------------------------------------------------------------------------

# Statements about a run or a job that no attempt makes, each with why it needs no attempt condition.
NOT_AN_ATTEMPTS = {
    "runs.create": "the run is born: no attempt exists before it",
    "runs.request_stop": "a person's Stop: a flag each attempt's gate check reads; it changes nothing written",
    "runs.stop_idle": "ends only a run no attempt drives (queued or waiting); the run's row lock orders it with a take",
    "approvals.decide": "a person's decision on a request; the attempt that filed it reads it",
    "runs.give_input": "a person's input to a question of a waiting run (no attempt drives it); the next reads it",
    "runs.purge_answers": "the leader drops kept answers past their time, never one still to be handed on",
    "schedules.fire": "the leader records a fire before its run exists: no attempt exists yet",
    "schedules.link_run": "the leader records the run its fire made, before any attempt drives it",
    "schedules.fire_failed": "the leader fails a fire that could make no run (no attempt ever existed)",
    "jobs.create": "the job is born: no attempt exists before it",
    "jobs.claim": "the take of a job: it raises the attempt, under the row lock of a queued job (SKIP LOCKED)",
    "jobs.cancel": "a person's cancel: a queued job ends (no attempt drives it), a running one is asked to stop",
    "jobs.restart": "a new job from an ended one: no attempt drives either",
    "jobs.sweep": "the leader takes back jobs whose holder died or lapsed, under their row locks",
    "fn:land_finished": "called only FROM the row of a statement's seal_checkpoint, which matched the attempt",
}
# Fence reads that need no row lock of their own, each with why.
UNLOCKED_FENCES = {
    "leases.take_up": "the attempt it checks is the one its lease was given under, read under the lease's row "
    "lock (FOR UPDATE SKIP LOCKED); every take rewrites that lease row in the same transaction",
}
# Row locks the design needs beyond the fence's own, FOR UPDATE: (alias, why).
DESIGN_LOCKS = {
    "runs.lock": ("r", "a decision's note and audit rows take FOR KEY SHARE on the run's row, which only FOR "
                  "UPDATE blocks: a decision lands before the suspend reads its requests or after its wait "
                  "committed, never in between, so its wake-up finds the run waiting (I15)"),
}  # fmt: skip
# Statements that only read, or write only leases, whose attempt condition is their fence all the same.
MUST_FENCE = {
    "fine_tune.clock": "the job's in-doubt window is judged by it: a job taken over stops here",
    "workflows.in_flight_for": "a workflow run taken over reads nothing, and waits out no window",
    "leases.take_up": "a run given under one attempt is taken up under that attempt only, never a later one",
}
# Attempt conditions the fence does not rest on, each with why: not mutated.
REDUNDANT = {
    "runs.lock": "the suspend that follows in the same transaction is fenced itself (seal_checkpoint); this "
    "condition only stops a fenced suspend one statement sooner",
}


def fenced_calls(sql: Sql, functions: dict[str, Sql]) -> list[str]:
    """The fenced SQL functions this statement calls with its own attempt in the fenced position."""
    out = []
    for name, args in sql.calls:
        fn = functions.get(name)
        if fn is None or fn.fenced_by is None or len(args) <= fn.fenced_by:
            continue
        arg = args[fn.fenced_by]
        if isinstance(arg, ast.ParamRef) and sql.params.get(int(cast(Any, arg).number)) == "attempt":
            out.append(name)
    return out


def about(sql: Sql, functions: dict[str, Sql]) -> str | None:
    """A run or a job, when the statement writes about one, by itself or through a function it calls."""
    if sql.about is not None:
        return sql.about
    for name, _ in sql.calls:
        fn = functions.get(name)
        if fn is not None and fn is not sql and fn.about is not None:
            return fn.about
    return None


def problems(sql: Sql, functions: dict[str, Sql]) -> list[str]:
    """What is wrong with the fence of one statement or function; [] when it holds."""
    out = [f"`{c.text}` is not a top-level conjunct of the condition that selects the {c.table} row (I3)"
           for c in sql.conditions if not c.conjunct]  # fmt: skip
    fenced = any(c.conjunct for c in sql.conditions) or bool(fenced_calls(sql, functions))
    if sql.is_function and sql.fenced_by is None and any(c.conjunct for c in sql.conditions):
        out.append("its attempt condition compares with no parameter of the function")
    writes = about(sql, functions)
    takes = sql.takes() or sql.name in {f"fn:{t}" for t in TAKES}
    if writes and not fenced and not takes and sql.name not in NOT_AN_ATTEMPTS:
        out.append(f"writes about a {writes} without an attempt condition (I3)")
    if sql.name in MUST_FENCE and not fenced:
        out.append(f"has no attempt condition: {MUST_FENCE[sql.name]} (I3)")
    if any(name == "land_finished" for name, _ in sql.calls) and "seal_checkpoint" not in fenced_calls(sql, functions):
        out.append("lands finished calls without the fenced seal_checkpoint they must ride on")
    if writes and sql.name not in UNLOCKED_FENCES:
        for c in sql.conditions:
            if c.conjunct and c.in_select and c.lock is None:
                out.append(f"reads its fence `{c.text}` and then writes, without FOR SHARE / FOR UPDATE on "
                           f"{c.alias} (a take committing meanwhile would not be seen)")  # fmt: skip
    if sql.name in DESIGN_LOCKS:
        alias = DESIGN_LOCKS[sql.name][0]
        if not any(lock.covers(alias) and lock.strength == LockClauseStrength.LCS_FORUPDATE for lock, _ in sql.locks):
            out.append(f"does not lock {alias} FOR UPDATE: {DESIGN_LOCKS[sql.name][1]}")
    return out


def fenced(sql: Sql, functions: dict[str, Sql]) -> bool:
    return any(c.conjunct for c in sql.conditions) or bool(fenced_calls(sql, functions))


# ----- mutants ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One fence broken in one place: its attempt condition dropped (`true`), weakened (`OR true`), or
    its row lock dropped."""

    target: str  # runs.end, fn:seal_checkpoint
    kind: str  # dropped, or_true, unlocked
    path: Path
    span: Span
    original: str
    replacement: str

    @property
    def key(self) -> str:
        return f"{self.target}:{self.kind}:{self.span.start}"

    def apply(self, text: str) -> str:
        assert text[self.span.start : self.span.end] == self.original, f"{self.key}: the text moved"
        return text[: self.span.start] + self.replacement + text[self.span.end :]


def mutants_of(sql: Sql) -> list[Mutant]:
    out: list[Mutant] = []
    for c in sql.conditions:
        if c.conjunct and sql.name not in REDUNDANT:
            out.append(Mutant(sql.name, "dropped", sql.path, c.span, c.text, "true"))
            out.append(Mutant(sql.name, "or_true", sql.path, c.span, c.text, f"({c.text} OR true)"))
    locks = {c.lock for c in sql.conditions if c.conjunct and c.lock is not None}
    if sql.name in DESIGN_LOCKS:
        locks |= {lock for lock, _ in sql.locks if lock.covers(DESIGN_LOCKS[sql.name][0])}
    for lock in sorted(locks, key=lambda lk: lk.span.start):
        out.append(Mutant(sql.name, "unlocked", sql.path, lock.span, lock.text, ""))
    return out


@functools.cache
def every_sql() -> tuple[dict[str, Sql], dict[str, Sql]]:
    """(named statements, functions by name), as the files are now (read once)."""
    return read_queries(), read_functions()


def all_mutants() -> list[Mutant]:
    queries, functions = every_sql()
    out: list[Mutant] = []
    for sql in [*queries.values(), *(functions[name] for name in sorted(functions))]:
        if fenced(sql, functions) or sql.name in DESIGN_LOCKS:
            out.extend(mutants_of(sql))
    return out


def judge_mutant(mutant: Mutant) -> list[str]:
    """What the static check says of the SQL with this one mutant applied (its target, and the statements
    that call a mutated function)."""
    text = mutant.apply(mutant.path.read_text())
    queries, functions = every_sql()
    if mutant.target.startswith("fn:"):
        name = mutant.target.removeprefix("fn:")
        functions = read_functions(texts={mutant.path: text})
        found = problems(functions[name], functions)
        for sql in queries.values():
            if any(call == name for call, _ in sql.calls):
                found += [f"{sql.name}: {p}" for p in problems(sql, functions)]
        return found
    statement = parse(text, mutant.path.stem)[mutant.target]
    header = re.search(rf"^--\s*name:\s*{re.escape(mutant.target.split('.', 1)[1])}\s*$", text, re.MULTILINE)
    assert header is not None
    mutated = read_statement(mutant.target, statement, mutant.path, text, text.index(statement, header.end()))
    return problems(mutated, functions)
