"""What the fences read by `fences.py` must be (I3), and the mutants that break them one at a time.

Every table a statement writes names the fence it needs (`FAMILIES`, or `UNFENCED` with why it needs
none): a run's rows the run's attempt, a job's rows the job fence (`job_holds`, migration 025), the
leader's and the processes' own rows the holder's identity. `problems` judges one statement or function:
each table it writes classified; each attempt condition a top-level conjunct of the condition that
selects its row; a statement that writes about a run, a job or the leader's rows fenced (or listed
below with why it needs no fence); the job fence never written out by hand; and the row lock taken where
a statement reads its fence before it writes. `tests/unit/test_statement_fences.py` asks it of every
statement and function; `make mutants` (tests/mutants) applies each of `all_mutants` to a copy of the
package and runs the tests that guard it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from pglast import ast
from pglast.enums.lockoptions import LockClauseStrength

from tests.support.fences import (
    JOB_TABLES,
    LEADER_TABLES,
    RUN_TABLES,
    TAKES,
    Condition,
    Span,
    Sql,
    read_functions,
    read_queries,
    read_statement,
)
from ticketiq.storage.queries import parse

# ----- judging ------------------------------------------------------------------------------------------

# The job fence, written once (migration 025): its id, its attempt, and still running. Its body's
# top-level conjuncts, with `{row}` its row parameter: a job swept `interrupted` or queued again keeps its
# attempt, so `running` fences as surely as the attempt does.
JOB_FENCE = "job_holds"
JOB_FENCE_CONJUNCTS = ("{row}.id = job_id", "{row}.attempt = attempt", "{row}.status = 'running'")
# The fence each table's rows need (fences.py reads which tables a statement writes). `leases` rows are
# classed by their name: `checkpoint:` a run's, `job:` a job's, `leader` (or no name the statement
# says: a process renewing or taking up its own) the leader's; an audit row with a run id is the run's.
FAMILIES = {
    **{table: "run" for table in RUN_TABLES | {"lease:checkpoint"}},
    **{table: "job" for table in JOB_TABLES | {"lease:job"}},
    **{table: "leader" for table in LEADER_TABLES},
}
# Tables whose rows belong to no attempt and no process, each with why no fence is needed.
UNFENCED = {
    "leases": "classed by the lease it writes (checkpoint:, job:, leader, or a process's own: see FAMILIES)",
    "audit_log": "an append-only record; a row with a run id is the run's (fenced with it), one about a job rides "
    "on the job's fenced or exempt statement, the others record what a person or the leader did",
    "a2a_tasks": "the A2A view of a run's task: messages merged by messageId whichever process writes last, its "
    "state read from the run; a stale writer can neither drop nor double a message",
    "teams_inbox": "a Teams activity, stored once per activity and linked to its turn by the run's key; the turn's "
    "own writes are its run's, fenced",
    "idempotency_keys": "a request's claim of its Idempotency-Key, fenced by its own claim (holder, created_at), "
    "not by a run (I19)",
    "signed_requests": "a signed delivery's claim (I19): one conditional insert, no attempt exists yet",
    "trigger_deliveries": "a webhook delivery's record, made before its run exists",
    "ticket_events": "a ticket event's record, made before its run exists",
    "triggers": "a person's webhook trigger (the API's admin routes)",
    "trigger_secrets": "a person's webhook trigger secrets (the API's admin routes)",
    "schedules": "a person's cron schedules; a fire and its outcome are its run's (schedule_fires)",
    "api_tokens": "a person's bearer tokens (the API's admin routes)",
    "console_sessions": "a person's console sign-in sessions",
    "quarantines": "a gate a person sets; each attempt's gate check reads it",
    "grants": "a gate a person sets; each attempt's gate check reads it",
    "tool_policies": "a gate a person sets; each attempt's gate check reads it",
    "principals": "a gate a person sets; each attempt's gate check reads it",
    "channels": "a gate a person sets; each attempt's gate check reads it",
    "retention_passes": "the retention pass's own record of what it deleted: no run, job or process owns it",
    "seal_probe": "the cluster's key probe (I17): one row, offered once, moved only from the key it was found under",
}

# Statements about a run or a job that no attempt makes, each with why it needs no attempt condition.
NOT_AN_ATTEMPTS = {
    "runs.create": "the run is born: no attempt exists before it",
    "runs.create_taken": "the run is born taken by its maker (issue 19): no attempt exists before it, and attempt 1, "
    "its lease and its attempt's row are the ones this statement writes",
    "runs.request_stop": "a person's Stop: a flag each attempt's gate check reads; it changes nothing written",
    "runs.hold": "a person's hold against the retention policy (issue 34): no attempt reads or writes it",
    "runs.release": "a person's release of that hold: no attempt reads or writes it",
    "runs.stop_idle": "ends only a run no attempt drives (queued or waiting); the run's row lock orders it with a take",
    "approvals.decide": "a person's decision on a request; the attempt that filed it reads it",
    "approvals.resume_restored": "a person's word on a restored run's held writes (I24): decisions, which the "
    "attempt that filed them reads, as approvals.decide's are",
    "restore.mark": "`ticketiq db restore` marks the runs a backup holds unfinished before any process starts on "
    "the database: no attempt of this world exists yet",
    "runs.give_input": "a person's input to a question of a waiting run (no attempt drives it); the next reads it",
    "retention.purge_runs": "the retention pass deletes only ended runs (no attempt drives one), each under its row "
    "lock taken with SKIP LOCKED, and the leader's pass only while the leader lease is its own",
    "retention.purge_jobs": "the retention pass deletes only ended jobs (no attempt drives one), under their row "
    "locks (SKIP LOCKED)",
    "retention.purge_short_lived": "the retention pass drops kept answers past their time, never one still to be "
    "handed on, and rows no attempt writes",
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
# Statements about the leader's or the processes' own rows that no holder's identity conditions, with why.
NOT_THE_HOLDERS = {
    "leader.register": "a process is born: its row inserted with its liveness lock; no identity held it before",
    "leader.lead": "the take of the leader lease: kept by its holder, or taken once it lapsed or its holder's "
    "liveness mark is free, in one conditional statement under the lease's row lock",
    "leader.claim_dead": "the leader ends processes whose liveness mark is free; their runs are taken under their "
    "attempts (give_runs)",
    "retention.purge_short_lived": "rows of processes ended long ago that hold no lease: nothing reads them again",
    "fn:leases_taken_lapsed": "a take's trigger: marks a process stalled once every lease it held lapsed; it "
    "changes nothing the process holds",
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


def holds(c: Condition, functions: dict[str, Sql]) -> bool:
    """Whether an attempt condition fences its row: written out, or a fence function given the row and,
    in the position its attempt condition compares with, the attempt."""
    if c.via is None:
        return True
    fn = functions.get(c.via)
    if fn is None or fn.fence_row is None or fn.fenced_by is None:
        return False
    return fn.fenced_by < len(c.attempt_args) and c.attempt_args[fn.fenced_by]


def fences(sql: Sql, functions: dict[str, Sql]) -> list[Condition]:
    """Its attempt conditions that fence: each holds and is a top-level conjunct."""
    return [c for c in sql.conditions if c.conjunct and holds(c, functions)]


def fenced_calls(sql: Sql, functions: dict[str, Sql]) -> list[str]:
    """The fenced SQL functions this statement calls with its own attempt in the fenced position (a fence
    function given the row, `job_holds`, is one of its conditions instead)."""
    out = []
    for name, args in sql.calls:
        fn = functions.get(name)
        if fn is None or fn.fenced_by is None or fn.fence_row is not None or len(args) <= fn.fenced_by:
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


def families(sql: Sql, functions: dict[str, Sql]) -> frozenset[str]:
    """Every fence family whose rows it writes, by itself or through a function it calls."""
    out = set(sql.families)
    for name, _ in sql.calls:
        fn = functions.get(name)
        if fn is not None and fn is not sql:
            out |= fn.families
    return frozenset(out)


def unclassified(sql: Sql) -> list[str]:
    """Tables it writes that no fence family names and no exemption covers."""
    return sorted(t for t in sql.writes if t not in FAMILIES and t not in UNFENCED)


def problems(sql: Sql, functions: dict[str, Sql]) -> list[str]:
    """What is wrong with the fence of one statement or function; [] when it holds."""
    out = [f"writes {table}, which names no fence (FAMILIES) nor why it needs none (UNFENCED)"
           for table in unclassified(sql)]  # fmt: skip
    out += [f"`{c.text}` is not a top-level conjunct of the condition that selects the {c.table} row (I3)"
            for c in sql.conditions if not c.conjunct]  # fmt: skip
    fenced = fenced_for(sql, functions)
    if sql.is_function and sql.fenced_by is None and any(c.conjunct for c in sql.conditions):
        out.append("its attempt condition compares with no parameter of the function")
    if sql.name == f"fn:{JOB_FENCE}":
        have = {" ".join(text.split()) for _, text in sql.row_conjuncts}
        out += [
            f"the job fence lacks the conjunct `{want}`"
            for want in (c.format(row=sql.fence_row) for c in JOB_FENCE_CONJUNCTS)
            if want not in have
        ]
    else:
        out += [
            f"writes the job fence out by hand (`{c.text}`): condition it on {JOB_FENCE}(<the job's row>, "
            "job_id, attempt) (migration 025)"
            for c in sql.conditions
            if c.table == "jobs" and c.via is None
        ]
        out += [f"`{c.text}` is no job fence: the job's row is fenced by {JOB_FENCE}"
                for c in sql.conditions if c.via not in (None, JOB_FENCE)]  # fmt: skip
        out += [
            f"`{c.text}` fences some job other than its own: give it %(job_id)s (or the held job's job_id)"
            for c in sql.conditions
            if c.via == JOB_FENCE and (c.args[1:2] or ("",))[0].split(".")[-1] not in ("%(job_id)s", "job_id")
        ]
    writes = families(sql, functions)
    takes = sql.takes() or sql.name in {f"fn:{t}" for t in TAKES}
    for family in sorted(writes & {"run", "job"}):
        if not fenced[family] and not takes and sql.name not in NOT_AN_ATTEMPTS:
            out.append(f"writes about a {family} without an attempt condition (I3)")
    if "leader" in writes and sql.name not in NOT_THE_HOLDERS and not any(h.conjunct for h in sql.holders):
        out.append("writes the leader's or a process's own rows without the holder's identity as a top-level "
                   "conjunct (`holder = %(holder)s`, `id = %(id)s`)")  # fmt: skip
    if sql.name in MUST_FENCE and not any(fenced.values()):
        out.append(f"has no attempt condition: {MUST_FENCE[sql.name]} (I3)")
    if any(name == "land_finished" for name, _ in sql.calls) and "seal_checkpoint" not in fenced_calls(sql, functions):
        out.append("lands finished calls without the fenced seal_checkpoint they must ride on")
    if writes & {"run", "job"} and sql.name not in UNLOCKED_FENCES:
        for c in fences(sql, functions):
            if c.in_select and c.lock is None:
                out.append(f"reads its fence `{c.text}` and then writes, without FOR SHARE / FOR UPDATE on "
                           f"{c.alias} (a take committing meanwhile would not be seen)")  # fmt: skip
    if sql.name in DESIGN_LOCKS:
        alias = DESIGN_LOCKS[sql.name][0]
        if not any(lock.covers(alias) and lock.strength == LockClauseStrength.LCS_FORUPDATE for lock, _ in sql.locks):
            out.append(f"does not lock {alias} FOR UPDATE: {DESIGN_LOCKS[sql.name][1]}")
    return out


def fenced(sql: Sql, functions: dict[str, Sql]) -> bool:
    return any(fenced_for(sql, functions).values())


def fenced_for(sql: Sql, functions: dict[str, Sql]) -> dict[str, bool]:
    """Whether its attempt conditions fence a run (on its checkpoint row, or through a fenced function such
    as seal_checkpoint) and a job (on its row, through the job fence)."""
    on = {c.table for c in fences(sql, functions)}
    return {"run": "checkpoints" in on or bool(fenced_calls(sql, functions)), "job": "jobs" in on}


# ----- mutants ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    """One fence broken in one place: its attempt condition dropped (`true`), weakened (`OR true`), its
    row lock dropped, or (the job fence) its `status = 'running'` dropped."""

    target: str  # runs.end, fn:seal_checkpoint
    kind: str  # dropped, or_true, unlocked, not_running
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


def mutants_of(sql: Sql, functions: dict[str, Sql]) -> list[Mutant]:
    out: list[Mutant] = []
    for c in fences(sql, functions):
        if sql.name not in REDUNDANT:
            out.append(Mutant(sql.name, "dropped", sql.path, c.span, c.text, "true"))
            out.append(Mutant(sql.name, "or_true", sql.path, c.span, c.text, f"({c.text} OR true)"))
    locks = {c.lock for c in fences(sql, functions) if c.lock is not None}
    if sql.name in DESIGN_LOCKS:
        locks |= {lock for lock, _ in sql.locks if lock.covers(DESIGN_LOCKS[sql.name][0])}
    for lock in sorted(locks, key=lambda lk: lk.span.start):
        out.append(Mutant(sql.name, "unlocked", sql.path, lock.span, lock.text, ""))
    if sql.name == f"fn:{JOB_FENCE}":
        running = JOB_FENCE_CONJUNCTS[-1].format(row=sql.fence_row)
        out += [Mutant(sql.name, "not_running", sql.path, span, text, "true")
                for span, text in sql.row_conjuncts if " ".join(text.split()) == running]  # fmt: skip
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
            out.extend(mutants_of(sql, functions))
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
