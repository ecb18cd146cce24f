"""I20 "already done" rests on a write: the statements that answer "done already" from a row they found,
each of which must call durable() (migration 026) on that row, and the mutants that break them.

`FOUND_IT` is the audit (issue 18): every statement whose found row a caller answers as done, or acts on
as done (skips, replays, refuses as a duplicate), with the store method and the caller. Statements that
decide "done already" through a write of their own (an upsert that updates, a row lock, a fenced write
under the take that covered what it read) are in `WRITES_ALREADY`, with the write. tests/unit/
test_durable_statements.py checks both against the SQL: each found-it statement calls durable() in the
target list of the SELECT that returns the found row (so it runs once per row found, and never on the path
that finds nothing), and no other statement calls it. `make mutants` drops each call (`durable()` ->
`true`) and weakens the function itself, and runs the behaviour tests that guard it (tests/mutants/
guards.py): the WAL test of each statement (test_found_it_waits.py) and the tests that make a commit
vanish (test_visible_not_durable.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pglast import ast, parse_sql

from tests.support.fence_rules import Mutant
from tests.support.fences import Span
from ticketiq.storage.queries import parse

_STORAGE = Path(__file__).resolve().parents[2] / "src" / "ticketiq" / "storage"
QUERY_FOLDER = _STORAGE / "queries"
DURABLE_MIGRATION = _STORAGE / "migrations" / "026_durable.sql"
CALL = "durable()"
_CALL = re.compile(r"\bdurable\(\)")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class FoundIt:
    store: str  # the store method that runs it
    caller: str  # who answers "done already" from its row, and how


FOUND_IT: dict[str, FoundIt] = {
    "idempotency.get": FoundIt(
        "IdempotencyStore.get",
        "entries/idempotency.py `_claim`: after `idempotency.claim` found the key taken, replays the kept answer "
        "(or answers 409 / 422 from the row)"),
    "runs.by_idempotency_key": FoundIt(
        "RunStore.by_idempotency_key",
        "Engine.create_run after `runs.create` (or `runs.create_taken`) found the key taken: the run made before, for "
        "a keyed POST /v1/runs (its repeat answered from it, with no `once`), "
        "an A2A message sent again, a cron fire, a Teams turn, a webhook delivery, a ticket event, a co-pilot turn"),
    "runs.by_delegation_key": FoundIt(
        "RunStore.by_delegation_key",
        "Engine.create_run for a delegation asked again (I9, engine/delegation.py): the child made before"),
    "jobs.create": FoundIt(
        "JobStore.create",
        "JobQueue.submit: a keyed POST /v1/jobs (or a workflow run's route) answered with the job made before"),
    "jobs.restarted_as": FoundIt(
        "JobStore.restarted_as",
        "JobQueue.restart: a keyed restart sent again answered with the job it made"),
    "jobs.found": FoundIt(
        "JobStore.found",
        "JobQueue.cancel: a cancel of a job cancelled before answered 200 `cancelled`"),
    "schedules.create": FoundIt(
        "ScheduleStore.create",
        "Scheduler.create: a keyed POST /v1/schedules answered with the schedule made before"),
    "teams.by_activity": FoundIt(
        "TeamsStore.receive",
        "TeamsTurns.receive: a redelivered activity answered with the row and run stored before, not stored again"),
    "teams.same_content": FoundIt(
        "TeamsStore.receive",
        "TeamsTurns.receive: a delivery with the content of one received within the window dropped as its duplicate"),
    "triggers.delivery": FoundIt(
        "TriggerStore.delivery, TriggerStore.record_delivery",
        "Triggers.deliver: a redelivery answered with the run the first delivery started (and a replay's 409)"),
    "triggers.ticket_event_runs": FoundIt(
        "TriggerStore.event_runs",
        "TicketIntake.receive: an agent whose run the event started is not started again; answered with it"),
    "triggers.ticket_event_run": FoundIt(
        "TriggerStore.record_event_run",
        "TicketIntake.receive: recording an event's run found it recorded; answered with the run recorded first"),
    "approvals.get": FoundIt(
        "RunStore.approval",
        "Engine.decide_approval: a decision that matched nothing answered 409 'was already approved / rejected' "
        "(or 404)"),
    "tokens.get": FoundIt(
        "TokenStore.get",
        "DELETE /v1/tokens/{name} and `ticketiq tokens revoke`: a revoke that matched nothing answered "
        "'revoked already'"),
}  # fmt: skip

# "Already done" decisions that rest on a write of their own statement (or transaction), with the write.
WRITES_ALREADY: dict[str, str] = {
    "triggers.create": "ON CONFLICT DO UPDATE writes the found trigger's row (its own request_key back)",
    "triggers.claim_signed": "ON CONFLICT DO UPDATE writes the found claim's row",
    "triggers.secret_made_by": "read in the transaction of triggers.lock, whose FOR UPDATE writes the row lock",
    "triggers.secrets_of": "read in the transaction of triggers.lock (a written row lock); TriggerStore.retire_secret "
    "raises a refusal ('retired already') only once that transaction committed",
    "approvals.decide": "the same decision again updates the row (decided_at kept)",
    "approvals.file": "its fence reads the checkpoint row FOR SHARE: a row lock, written",
    "runs.give_input": "the question is read FOR UPDATE: a row lock, written",
    "schedules.fire": "its `moved` CTE updates the schedule's row whether or not the fire row was there",
    "schedules.record_outcome": "its fence reads the checkpoint row FOR SHARE: a row lock, written",
    "inspector.start": "Inspector._begun_before writes its own audit row (inspector.audit) before it "
    "answers from the start it found",
    "runs.kept_answer": "read by the attempt that took the run: the take (take_run) wrote after every row of "
    "the attempts before it (fenced, they can write nothing after it)",
    "calls.for_step": "as runs.kept_answer: a resume's settlement reads the calls after its take",
}


def read_statements(texts: dict[Path, str] | None = None) -> dict[str, tuple[Path, int, str]]:
    """Every named statement: (its file, where it starts in the file, its text)."""
    out: dict[str, tuple[Path, int, str]] = {}
    for path in sorted(QUERY_FOLDER.glob("*.sql")):
        text = (texts or {}).get(path) or path.read_text()
        for name, sql in parse(text, path.stem).items():
            header = re.search(rf"^--\s*name:\s*{re.escape(name.split('.', 1)[1])}\s*$", text, re.MULTILINE)
            assert header is not None
            out[name] = (path, text.index(sql, header.end()), sql)
    return out


def _nodes(value: Any) -> Iterator[ast.Node]:
    if isinstance(value, tuple | list):
        for item in value:
            yield from _nodes(item)
    elif isinstance(value, ast.Node):
        yield value


def _calls(node: ast.Node, in_targets: bool = False) -> Iterator[bool]:
    """For each durable() call under `node`: whether it stands in a SELECT's target list."""
    if isinstance(node, ast.FuncCall) and [n.sval for n in node.funcname or ()] == ["durable"]:
        yield in_targets
    for name in node:
        value = getattr(node, name)
        # A SELECT's own target list; anything else of it (its WHERE, its FROM, its branches) is not.
        inside = in_targets if not isinstance(node, ast.SelectStmt) else name == "targetList"
        for child in _nodes(value):
            yield from _calls(child, inside)


def durable_calls(sql: str) -> list[bool]:
    """Each durable() call of a statement, and whether it stands in a SELECT's target list."""
    # psycopg's placeholders as the parser's ($1: any one serves, only the shape is read)
    parsed = parse_sql(_PLACEHOLDER.sub("$1", sql).replace("%%", "%"))
    return [placed for stmt in parsed for placed in _calls(stmt)]


def problems(name: str, sql: str) -> list[str]:
    calls = durable_calls(sql)
    out = []
    if name in FOUND_IT and not calls:
        out.append(f"answers 'done already' from the row it finds ({FOUND_IT[name].caller}) without durable() "
                   "on that row (I20, migration 026)")  # fmt: skip
    if name not in FOUND_IT and calls:
        out.append("calls durable() but is no declared found-it statement (FOUND_IT): every statement that calls "
                   "it pays a commit that waits for the standby")  # fmt: skip
    if any(not placed for placed in calls):
        out.append("calls durable() outside a SELECT's target list: it must run once per row found, and only then")
    return out


# ----- mutants ------------------------------------------------------------------------------------------

# The function weakened as the first sketch had it (an id, no WAL: its commit waits for nothing),
# and with a message that is not transactional (WAL, but no id: neither).
FUNCTION_MUTANTS = {
    "xid_only": ("pg_logical_emit_message(true, 'ticketiq.durable', current_database()) IS NOT NULL",
                 "pg_current_xact_id() IS NOT NULL"),
    "not_transactional": ("pg_logical_emit_message(true,", "pg_logical_emit_message(false,"),
}  # fmt: skip


@functools.cache
def durable_mutants() -> tuple[Mutant, ...]:
    out: list[Mutant] = []
    for name, (path, start, sql) in read_statements().items():
        out += [Mutant(name, "not_durable", path, Span(start + m.start(), start + m.end()), CALL, "true")
                for m in _CALL.finditer(sql)]  # fmt: skip
    text = DURABLE_MIGRATION.read_text()
    for kind, (original, replacement) in FUNCTION_MUTANTS.items():
        at = text.index(original)
        out.append(Mutant("fn:durable", kind, DURABLE_MIGRATION, Span(at, at + len(original)), original, replacement))
    return tuple(out)


def judge_durable(mutant: Mutant) -> list[str]:
    """What the static check says of the SQL with this one mutant applied (none for the function's: its
    body is judged by behaviour only)."""
    if mutant.target.startswith("fn:"):
        return []
    text = mutant.apply(mutant.path.read_text())
    _, _, sql = read_statements({mutant.path: text})[mutant.target]
    return problems(mutant.target, sql)
