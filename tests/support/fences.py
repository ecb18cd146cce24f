"""The fences of the SQL, read by Postgres's own parser (pglast wraps libpg_query): which tables each
statement and SQL function writes (and so whether it writes about a run, a job, or the leader's and the
processes' own rows), the attempt conditions that fence them (I3), written out or through a fence function
that takes the fenced row (`job_holds(j, %(job_id)s, %(attempt)s)`), whether each is a top-level conjunct
of the condition that selects its row, the holder conditions of the leader's statements, and the row
locks a statement that reads its fence before it writes takes on the fenced row.
`tests/unit/test_statement_fences.py` judges them; `make mutants` (tests/mutants) breaks them one at a
time.

A text search cannot tell `attempt = %(attempt)s` from `(attempt = %(attempt)s OR true)`, nor see that a
`FOR SHARE` is gone; the parse tree can.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from pglast import ast, parse_plpgsql, parse_sql
from pglast.enums.lockoptions import LockClauseStrength
from pglast.enums.nodes import JoinType
from pglast.enums.parsenodes import FunctionParameterMode
from pglast.enums.primnodes import BoolExprType
from pglast.parser import scan

from ticketiq.storage.queries import parse

# The rows that carry the fencing token: a run's checkpoint row and a job's row.
FENCE_TABLES = frozenset({"checkpoints", "jobs"})
# What a run and a job are made of: a statement that writes one of these writes about a run or a job.
# A schedule fire's outcome is its run's hand-on: schedule_fires is written about a run too.
RUN_TABLES = frozenset({"runs", "checkpoints", "calls", "approvals", "transcripts", "answers", "inputs",
                        "schedule_fires", "run_attempts"})  # fmt: skip
JOB_TABLES = frozenset({"jobs", "workflow_steps", "knowledge", "classifiers", "red_team_answers"})
# The leader's and each process's own rows: the leader lease, the processes table, and leases named by no
# constant (a process's renewal and take-up of its own): written under the holder's identity.
LEADER_TABLES = frozenset({"processes", "lease:leader"})
# The column a process's own row is found by, per table: its holder's identity.
HOLDER_COLUMNS = {"leases": "holder", "processes": "id"}
# Functions that take a run: they raise its attempt, under the row lock their caller took.
TAKES = frozenset({"take_run", "give_runs"})
# Enough of a lock to wait for a take's UPDATE of the row (FOR KEY SHARE is not: it does not conflict).
STRONG = frozenset({LockClauseStrength.LCS_FORSHARE, LockClauseStrength.LCS_FORNOKEYUPDATE,
                    LockClauseStrength.LCS_FORUPDATE})  # fmt: skip
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")
_MIGRATIONS = Path(__file__).resolve().parents[2] / "src" / "ticketiq" / "storage" / "migrations"
_QUERIES = _MIGRATIONS.parent / "queries"


@dataclass(frozen=True)
class Span:
    """[start, end) in the text of the file the SQL lives in."""

    start: int
    end: int


@dataclass(frozen=True)
class Condition:
    """One attempt condition: `<fence table>.attempt = <the attempt>`, where it stands."""

    span: Span
    text: str
    table: str  # checkpoints or jobs
    alias: str  # the name the fence table goes by in its scope
    conjunct: bool  # a top-level conjunct of the WHERE (or inner JOIN ... ON) that selects the row
    in_select: bool  # in a SELECT (a fence read), not in the UPDATE/DELETE that writes the row itself
    lock: Lock | None  # for a fence read: the locking clause that covers the fence row, if any
    # A fence function called with the fenced row (`job_holds(j, ...)`): its name, for each argument
    # whether it is the attempt, and what each is (`%(job_id)s`, `h.job_id`; "" for anything else).
    # None: the condition is written out (`c.attempt = %(attempt)s`).
    via: str | None = None
    attempt_args: tuple[bool, ...] = ()
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class Lock:
    span: Span
    text: str
    strength: LockClauseStrength
    rels: tuple[str, ...]  # FOR ... OF these; empty: every table of the SELECT

    def covers(self, alias: str) -> bool:
        return self.strength in STRONG and (not self.rels or alias in self.rels)


@dataclass
class Sql:
    """One named statement (`runs.end`) or one SQL function's last definition (`fn:seal_checkpoint`)."""

    name: str
    path: Path  # the file it lives in
    text: str  # that file's whole text
    conditions: list[Condition] = field(default_factory=list)
    locks: list[tuple[Lock, tuple[str, ...]]] = field(default_factory=list)  # every lock, with its scope's aliases
    writes: set[str] = field(default_factory=set)  # tables written (leases also as lease:checkpoint|job|leader)
    holders: list[Condition] = field(default_factory=list)  # `holder = %(holder)s` on leases, `id = ...` on processes
    calls: list[tuple[str, list[Any]]] = field(default_factory=list)  # functions called, with their arguments
    audits_run: bool = False  # an audit_log row with a run id
    params: dict[int, str] = field(default_factory=dict)  # $n -> the placeholder's name
    fenced_by: int | None = None  # a function: the parameter (0-based) its attempt condition compares with
    parameters: tuple[str, ...] = ()
    fence_row: str | None = None  # a function: its parameter that takes a fence table's row (`job jobs`)
    row_conjuncts: list[tuple[Span, str]] = field(default_factory=list)  # such a function's `a = b` conjuncts

    @property
    def is_function(self) -> bool:
        return self.name.startswith("fn:")

    @property
    def about(self) -> str | None:
        """What it writes about: a run, a job, or neither."""
        if self.writes & RUN_TABLES or "lease:checkpoint" in self.writes or self.audits_run:
            return "run"
        if self.writes & JOB_TABLES or "lease:job" in self.writes:
            return "job"
        return None

    @property
    def families(self) -> frozenset[str]:
        """Every fence family whose rows it writes: run, job, leader."""
        out = set()
        if self.writes & RUN_TABLES or "lease:checkpoint" in self.writes or self.audits_run:
            out.add("run")
        if self.writes & JOB_TABLES or "lease:job" in self.writes:
            out.add("job")
        leases_of_no_kind = "leases" in self.writes and not any(w.startswith("lease:") for w in self.writes)
        if self.writes & LEADER_TABLES or leases_of_no_kind:
            out.add("leader")
        return frozenset(out)

    def takes(self) -> bool:
        return any(name in TAKES for name, _ in self.calls)


# ----- reading -------------------------------------------------------------------------------------------


def _placeholders(sql: str) -> tuple[str, dict[int, str], dict[int, int]]:
    """psycopg's `%(name)s` as `$n`, padded to the same length so every offset stays; `%%` as `%`+space.
    Returns the text, $n -> name, and the length of the placeholder at each offset."""
    numbers: dict[str, int] = {}
    lengths: dict[int, int] = {}

    def sub(m: re.Match[str]) -> str:
        n = numbers.setdefault(m.group(1), len(numbers) + 1)
        lengths[m.start()] = len(m.group(0))
        return f"${n}".ljust(len(m.group(0)))

    text = _PLACEHOLDER.sub(sub, sql).replace("%%", "% ")
    return text, {n: name for name, n in numbers.items()}, lengths


def _nodes(value: Any) -> list[Any]:
    """A node list of the parse tree (None when empty), as a plain list of untyped nodes."""
    return list(value or ())


def _children(node: Any) -> Iterator[Any]:
    if isinstance(node, tuple | list):
        for item in node:
            yield from _children(item)
    elif isinstance(node, ast.Node):
        yield node


def _fields(node: ast.Node) -> Iterator[tuple[str, Any]]:
    for name in node:
        yield name, getattr(node, name)


def _walk(node: Any, stop_at_statements: bool = True) -> Iterator[ast.Node]:
    """Every node under `node` (itself included), not entering nested statements (their own scopes)."""
    for child in _children(node):
        yield child
        for _, value in _fields(child):
            for grand in _children(value):
                if stop_at_statements and isinstance(grand, _STATEMENTS):
                    continue
                yield from _walk(grand, stop_at_statements)


_STATEMENTS = (ast.SelectStmt, ast.InsertStmt, ast.UpdateStmt, ast.DeleteStmt)


def _statements(node: Any) -> Iterator[ast.Node]:
    """Every statement in the tree (CTEs, sub-selects, the INSERT's SELECT, set operations)."""
    for child in _children(node):
        if isinstance(child, _STATEMENTS):
            yield child
        for _, value in _fields(child):
            yield from _statements(value)


def _conjuncts(expr: Any) -> list[ast.Node]:
    """The top-level conjuncts of a condition: through ANDs only (never into an OR, a NOT, a CASE)."""
    if isinstance(expr, ast.BoolExpr) and expr.boolop == BoolExprType.AND_EXPR:
        return [c for arg in _nodes(expr.args) for c in _conjuncts(arg)]
    return [] if expr is None else [expr]


@dataclass
class _Scope:
    aliases: dict[str, str]  # alias -> table (a base table), or "" for a CTE, a function, a sub-select
    conditions: list[Any]  # WHERE and inner-join ON clauses
    conjuncts: set[int]  # id() of their top-level conjuncts
    kind: str  # select, update, delete, insert


def _from_items(items: Any, scope: _Scope, ctes: set[str]) -> None:
    for item in _children(items):
        if isinstance(item, ast.RangeVar):
            name = item.alias.aliasname if item.alias else item.relname
            scope.aliases[str(name)] = "" if item.relname in ctes else str(item.relname)
        elif isinstance(item, ast.JoinExpr):
            _from_items(item.larg, scope, ctes)
            _from_items(item.rarg, scope, ctes)
            if item.quals is not None:
                scope.conditions.append(item.quals)
                if item.jointype == JoinType.JOIN_INNER:
                    scope.conjuncts.update(id(c) for c in _conjuncts(item.quals))
        elif isinstance(item, ast.RangeFunction | ast.RangeSubselect) and item.alias is not None:
            scope.aliases[str(item.alias.aliasname)] = ""


def _scope(stmt: ast.Node, ctes: set[str]) -> _Scope:
    scope = _Scope({}, [], set(), type(stmt).__name__.removesuffix("Stmt").lower())
    if isinstance(stmt, ast.SelectStmt):
        _from_items(stmt.fromClause, scope, ctes)
    elif isinstance(stmt, ast.UpdateStmt):
        _from_items(stmt.relation, scope, ctes)
        _from_items(stmt.fromClause, scope, ctes)
    elif isinstance(stmt, ast.DeleteStmt):
        _from_items(stmt.relation, scope, ctes)
        _from_items(stmt.usingClause, scope, ctes)
    where = getattr(stmt, "whereClause", None)
    if where is not None:
        scope.conditions.append(where)
        scope.conjuncts.update(id(c) for c in _conjuncts(where))
    return scope


def _column(node: Any) -> tuple[str, ...] | None:
    if isinstance(node, ast.ColumnRef) and all(isinstance(f, ast.String) for f in _nodes(node.fields)):
        return tuple(str(f.sval).lower() for f in _nodes(node.fields))
    return None


class _Reader:
    def __init__(
        self,
        sql: Sql,
        source: str,
        offset: int,
        params: dict[int, str],
        lengths: dict[int, int],
        rows: dict[str, str] | None = None,
    ) -> None:
        self.sql = sql
        self.rows = rows or {}  # a fence function's row parameters: name -> fence table
        self.source = source  # the text parsed (placeholders replaced), whose offset 0 is `offset` in the file
        self.offset = offset
        self.params = params
        self.lengths = lengths
        self.tokens = scan(source)
        self.pending: list[tuple[int, ast.Node]] = []  # conditions found, with the statement they stand in

    def span(self, start: int, end: int) -> Span:
        return Span(self.offset + start, self.offset + end)

    def end_of(self, node: Any) -> int:
        """Where the last token of an operand ends: a column (a.b) or a placeholder."""
        loc = int(node.location)
        if isinstance(node, ast.ParamRef):
            return loc + self.lengths.get(loc, len(f"${node.number}"))
        i = next(k for k, t in enumerate(self.tokens) if t.start == loc)
        end = self.tokens[i].end + 1
        while i + 2 < len(self.tokens) and self.source[self.tokens[i + 1].start] == ".":
            i += 2
            end = self.tokens[i].end + 1
        return end

    def read(self, tree: Any, function_params: tuple[str, ...] = ()) -> None:
        ctes = {str(node.ctename) for node in _walk_all(tree) if isinstance(node, ast.CommonTableExpr)}
        selects = []
        for stmt in _statements(tree):
            scope = _scope(stmt, ctes)
            if self.rows and isinstance(stmt, ast.SelectStmt) and not stmt.fromClause:
                # A fence function's body (`SELECT job.id = job_id AND job.attempt = attempt ...`): its
                # answer is the condition that selects the row its caller passes.
                scope.aliases.update(self.rows)
                for target in _nodes(stmt.targetList):
                    scope.conditions.append(target.val)
                    scope.conjuncts.update(id(c) for c in _conjuncts(target.val))
                    self._row_conjuncts(target.val)
            self._writes(stmt, ctes)
            self._conditions(stmt, scope, function_params)
            if isinstance(stmt, ast.SelectStmt) and stmt.lockingClause:
                selects.append((stmt, scope))
        for node in _walk_all(tree):
            if isinstance(node, ast.FuncCall):
                self.sql.calls.append((str(_nodes(node.funcname)[-1].sval).lower(), _nodes(node.args)))
        self._locks(selects)

    def _writes(self, stmt: ast.Node, ctes: set[str]) -> None:
        if isinstance(stmt, ast.InsertStmt | ast.UpdateStmt | ast.DeleteStmt):
            table = str(cast(Any, stmt).relation.relname)
            if table == "leases":
                consts = {n.val.sval for n in _walk_all(stmt) if isinstance(n, ast.A_Const)
                          and isinstance(n.val, ast.String)}  # fmt: skip
                kinds = {k for k in ("checkpoint", "job") if any(str(c).startswith(f"{k}:") for c in consts)}
                kinds |= {"leader"} & {str(c) for c in consts}
                self.sql.writes.update(f"lease:{k}" for k in kinds)
            self.sql.writes.add(table)
            if isinstance(stmt, ast.InsertStmt) and table == "audit_log":
                self.sql.audits_run |= self._audits_a_run(stmt)

    def _audits_a_run(self, stmt: ast.InsertStmt) -> bool:
        columns = [c.name for c in stmt.cols or ()]
        if "run_id" not in columns:
            return False
        at = columns.index("run_id")
        select = stmt.selectStmt
        rows = select.valuesLists or [select.targetList] if isinstance(select, ast.SelectStmt) else []
        for row in rows:
            cell = _nodes(row)[at]
            value = cell.val if isinstance(cell, ast.ResTarget) else cell
            if not (isinstance(value, ast.A_Const) and value.isnull):
                return True
        return False

    def _conditions(self, stmt: ast.Node, scope: _Scope, function_params: tuple[str, ...]) -> None:
        for expr in scope.conditions:
            for node in _walk(expr):
                if isinstance(node, ast.FuncCall):
                    self._row_fence(node, stmt, scope, function_params)
                if not (isinstance(node, ast.A_Expr) and node.name and node.name[-1].sval == "="):
                    continue
                self._holder(node, scope)
                for fence, other in ((node.lexpr, node.rexpr), (node.rexpr, node.lexpr)):
                    alias = self._fence_column(fence, scope)
                    if alias is None or not self._the_attempt(other, scope, function_params):
                        continue
                    start = min(
                        int(cast(Any, n).location) for n in _walk(node) if isinstance(n, ast.ColumnRef | ast.ParamRef)
                    )
                    end = max(self.end_of(n) for n in (node.lexpr, node.rexpr))
                    span = self.span(start, end)
                    self.sql.conditions.append(Condition(
                        span=span, text=self.sql.text[span.start : span.end], table=scope.aliases[alias],
                        alias=alias, conjunct=id(node) in scope.conjuncts, in_select=isinstance(stmt, ast.SelectStmt),
                        lock=None,
                    ))  # fmt: skip
                    self.pending.append((len(self.sql.conditions) - 1, stmt))
                    break

    def _row_conjuncts(self, condition: Any) -> None:
        for c in _conjuncts(condition):
            if isinstance(c, ast.A_Expr) and isinstance(c.lexpr, ast.ColumnRef):
                if isinstance(c.rexpr, ast.A_Const):  # a literal carries no location: the token after the operator
                    op = next(k for k, tok in enumerate(self.tokens) if tok.start == int(cast(Any, c).location))
                    end = int(self.tokens[op + 1].end) + 1
                else:
                    end = self.end_of(c.rexpr)
                span = self.span(int(cast(Any, c.lexpr).location), end)
                self.sql.row_conjuncts.append((span, self.sql.text[span.start : span.end]))

    def _row_fence(self, call: ast.FuncCall, stmt: ast.Node, scope: _Scope, function_params: tuple[str, ...]) -> None:
        """A function called with a fence table's row first (`job_holds(j, %(job_id)s, %(attempt)s)`): a
        condition on that row, whose function the judge looks at (is it a fence, which argument is the
        attempt)."""
        args = _nodes(call.args)
        col = _column(args[0]) if args else None
        if col is None or len(col) != 1 or scope.aliases.get(col[0]) not in FENCE_TABLES:
            return
        start = int(cast(Any, call).location)
        span = self.span(start, self.closing_paren(start))
        self.sql.conditions.append(Condition(
            span=span, text=self.sql.text[span.start : span.end], table=scope.aliases[col[0]], alias=col[0],
            conjunct=id(call) in scope.conjuncts, in_select=isinstance(stmt, ast.SelectStmt), lock=None,
            via=str(_nodes(call.funcname)[-1].sval).lower(),
            attempt_args=tuple(self._the_attempt(a, scope, function_params) for a in args),
            args=tuple(self._argument(a) for a in args),
        ))  # fmt: skip
        self.pending.append((len(self.sql.conditions) - 1, stmt))

    def _argument(self, node: Any) -> str:
        if isinstance(node, ast.ParamRef):
            return f"%({self.params.get(int(cast(Any, node).number))})s"
        return ".".join(_column(node) or ())

    def closing_paren(self, start: int) -> int:
        """Where the call whose name starts at `start` ends: past its closing parenthesis."""
        depth = 0
        for tok in self.tokens:
            if tok.start < start:
                continue
            char = self.source[tok.start : tok.end + 1]
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == ")" and depth == 0:
                return int(tok.end) + 1
        raise AssertionError(f"{self.sql.name}: no closing parenthesis after offset {start}")

    def _holder(self, node: ast.A_Expr, scope: _Scope) -> None:
        """`holder = %(holder)s` on leases, `id = %(holder)s|%(id)s` on processes: a process's own rows."""
        for side, other in ((node.lexpr, node.rexpr), (node.rexpr, node.lexpr)):
            col = _column(side)
            if col is None or not isinstance(other, ast.ParamRef):
                continue
            if self.params.get(int(cast(Any, other).number)) not in ("holder", "id"):
                continue
            owned = [a for a, t in scope.aliases.items() if HOLDER_COLUMNS.get(t) == col[-1]]
            alias = col[0] if len(col) == 2 else (owned[0] if len(owned) == 1 else None)
            if alias not in owned:
                continue
            start = min(int(cast(Any, n).location) for n in (side, other))
            span = self.span(start, max(self.end_of(n) for n in (side, other)))
            self.sql.holders.append(Condition(
                span=span, text=self.sql.text[span.start : span.end], table=scope.aliases[str(alias)],
                alias=str(alias), conjunct=id(node) in scope.conjuncts, in_select=False, lock=None,
            ))  # fmt: skip

    def _fence_column(self, node: Any, scope: _Scope) -> str | None:
        col = _column(node)
        if col is None or col[-1] != "attempt":
            return None
        if len(col) == 2:
            return col[0] if scope.aliases.get(col[0]) in FENCE_TABLES else None
        tables = [a for a, t in scope.aliases.items() if t in FENCE_TABLES]
        return tables[0] if len(tables) == 1 else None

    def _the_attempt(self, node: Any, scope: _Scope, function_params: tuple[str, ...]) -> bool:
        if isinstance(node, ast.ParamRef):
            return self.params.get(int(cast(Any, node).number)) == "attempt"
        col = _column(node)
        if col is None:
            return False
        if len(col) == 1:
            return col[0] in function_params and "attempt" in col[0]
        # Another row's attempt: the one a hand-back names, or the one a lease was given under.
        return col[-1] == "attempt" and scope.aliases.get(col[0], "") not in FENCE_TABLES

    def _locks(self, selects: list[tuple[ast.SelectStmt, _Scope]]) -> None:
        spans = _lock_spans(self.source, self.tokens)
        ordered = sorted(
            selects,
            key=lambda s: min(
                int(n.location) for n in _walk(s[0].targetList) if hasattr(n, "location") and n.location is not None
            ),
        )
        clauses = [(clause, stmt, scope) for stmt, scope in ordered for clause in _nodes(stmt.lockingClause)]
        assert len(clauses) == len(spans), f"{self.sql.name}: {len(clauses)} locking clauses, {len(spans)} found"
        by_stmt: dict[int, list[Lock]] = {}
        for (clause, stmt, scope), (start, end) in zip(clauses, spans, strict=True):
            span = self.span(start, end)
            lock = Lock(span, self.sql.text[span.start : span.end], LockClauseStrength(clause.strength),
                        tuple(r.relname for r in clause.lockedRels or ()))  # fmt: skip
            self.sql.locks.append((lock, tuple(scope.aliases)))
            by_stmt.setdefault(id(stmt), []).append(lock)
        for index, holder in self.pending:
            cond = self.sql.conditions[index]
            if cond.in_select:
                cover = next((lk for lk in by_stmt.get(id(holder), []) if lk.covers(cond.alias)), None)
                self.sql.conditions[index] = replace(cond, lock=cover)


def _walk_all(node: Any) -> Iterator[ast.Node]:
    return _walk(node, stop_at_statements=False)


_LOCK_HEADS = {("UPDATE",), ("SHARE",), ("NO", "KEY", "UPDATE"), ("KEY", "SHARE")}


def _lock_spans(source: str, tokens: list[Any]) -> list[tuple[int, int]]:
    """The text of every `FOR UPDATE|SHARE|NO KEY UPDATE|KEY SHARE [OF a, b] [SKIP LOCKED|NOWAIT]`."""
    words = [source[t.start : t.end + 1].upper() for t in tokens]
    out = []
    for i, word in enumerate(words):
        if word != "FOR":
            continue
        head = next((h for h in _LOCK_HEADS if tuple(words[i + 1 : i + 1 + len(h)]) == h), None)
        if head is None:
            continue
        j = i + len(head)
        if j + 1 < len(words) and words[j + 1] == "OF":
            j += 2
            while j + 2 < len(words) and words[j + 1] == ",":
                j += 2
        if j + 2 < len(words) and (words[j + 1], words[j + 2]) == ("SKIP", "LOCKED"):
            j += 2
        elif j + 1 < len(words) and words[j + 1] == "NOWAIT":
            j += 1
        out.append((tokens[i].start, tokens[j].end + 1))
    return out


def read_statement(name: str, sql: str, path: Path, text: str, offset: int) -> Sql:
    """One named statement: `sql` stands at `offset` of the file `path` whose whole text is `text`."""
    source, params, lengths = _placeholders(sql)
    out = Sql(name, path, text, params=params)
    _Reader(out, source, offset, params, lengths).read(parse_sql(source))
    return out


def _function_queries(stmt: ast.CreateFunctionStmt, statement_text: str, body: str) -> Iterator[str]:
    language = next(o.arg.sval for o in _nodes(stmt.options) if o.defname == "language")
    if language == "sql":
        yield body
        return
    found: list[str] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            expr = node.get("PLpgSQL_expr")
            if isinstance(expr, dict) and isinstance(expr.get("query"), str):
                found.append(expr["query"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(parse_plpgsql(statement_text))
    for query in found:
        if query.lstrip().upper().startswith(("WITH", "SELECT", "INSERT", "UPDATE", "DELETE")):
            yield query


def read_functions(folder: Path = _MIGRATIONS, texts: dict[Path, str] | None = None) -> dict[str, Sql]:
    """Each SQL function's last definition across the migrations (a later one replaces an earlier);
    `texts` stands in for the text of some of the files (a mutant's)."""
    out: dict[str, Sql] = {}
    for path in sorted(folder.glob("*.sql")):
        text = (texts or {}).get(path) or path.read_text()
        for raw in parse_sql(text):
            stmt = raw.stmt
            if not isinstance(stmt, ast.CreateFunctionStmt):
                continue
            name = str(_nodes(stmt.funcname)[-1].sval)
            at_stmt = int(cast(int, raw.stmt_location))
            end = at_stmt + raw.stmt_len if raw.stmt_len else len(text)
            statement_text = text[at_stmt:end]
            body = str(next(o.arg[0].sval for o in _nodes(stmt.options) if o.defname == "as"))
            table = FunctionParameterMode.FUNC_PARAM_TABLE  # RETURNS TABLE columns are no parameters
            parameters = tuple(str(p.name) for p in _nodes(stmt.parameters) if p.mode != table)
            rows = {str(p.name): str(_nodes(p.argType.names)[-1].sval) for p in _nodes(stmt.parameters)
                    if p.mode != table and str(_nodes(p.argType.names)[-1].sval) in FENCE_TABLES}  # fmt: skip
            sql = Sql(f"fn:{name}", path, text, parameters=parameters, fence_row=next(iter(rows), None))
            body_at = at_stmt + statement_text.index(body)
            for query in _function_queries(stmt, statement_text, body):
                # PL/pgSQL gives a PERFORM back as SELECT: one character shorter, the rest where it stands.
                found = body.find(query)
                at = body_at + (found if found >= 0 else body.index("PERFORM" + query[len("SELECT") :]) + 1)
                _Reader(sql, query, at, {}, {}, rows).read(parse_sql(query), parameters)
            fences = [c for c in sql.conditions if c.conjunct]
            for cond in fences:
                param = cond.text.split("=")[-1].strip()
                if param in parameters:
                    sql.fenced_by = parameters.index(param)
            out[name] = sql
    return out


def read_queries(folder: Path = _QUERIES, texts: dict[Path, str] | None = None) -> dict[str, Sql]:
    """Every named statement of queries/*.sql, as storage/queries.py loads them, read where it stands;
    `texts` stands in for the text of some of the files (a mutant's)."""
    out: dict[str, Sql] = {}
    for path in sorted(folder.glob("*.sql")):
        text = (texts or {}).get(path) or path.read_text()
        for name, sql in parse(text, path.stem).items():
            header = re.search(rf"^--\s*name:\s*{re.escape(name.split('.', 1)[1])}\s*$", text, re.MULTILINE)
            assert header is not None
            out[name] = read_statement(name, sql, path, text, text.index(sql, header.end()))
    return out
