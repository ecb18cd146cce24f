"""Query names stay in storage (issue 17): only `ticketiq.storage` names a statement of
`storage/queries/*.sql`, so every statement has one home (a store, a handle) that types its rows and, for
a fenced one, turns "matched nothing" into the fence's exception. Elsewhere a module asks a store.

Read from the source: every string literal and comment of every module outside `storage/` (an f-string
too), and every name imported from `storage/` whose value is a query name (a constant that names one).
The stand-ins (`ticketiq.standins`) are a separate program with their own schema and their own
`standins/queries.sql`, loaded by their own store (`standins/records.py`, as `standin.<name>`): none of
their names is an app query name, and they are read like every other module.
"""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize
from pathlib import Path

from ticketiq.storage.queries import QUERIES

PACKAGE = Path(importlib.import_module("ticketiq").__file__ or "").parent
STORAGE = PACKAGE / "storage"
_NAME = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(QUERIES, key=len, reverse=True))) + r")(?!\w)")


def outside_storage() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if STORAGE not in p.parents)


def named_in_text(source: str) -> list[tuple[int, str]]:
    """(line, query name) for each query name in a string literal or a comment."""
    found = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.STRING, tokenize.COMMENT):
            found += [(tok.start[0], m.group(1)) for m in _NAME.finditer(tok.string)]
    return found


def query_constants() -> dict[str, set[str]]:
    """storage module -> its module-level names whose value is a query name."""
    out: dict[str, set[str]] = {}
    for path in STORAGE.glob("*.py"):
        module = importlib.import_module(f"ticketiq.storage.{path.stem}")
        named = {name for name, value in vars(module).items() if isinstance(value, str) and value in QUERIES}
        if named:
            out[module.__name__] = named
    return out


def named_through_constants(source: str, constants: dict[str, set[str]]) -> list[tuple[int, str]]:
    """(line, module.NAME) for each such constant imported (or read off its module)."""
    found = []
    tree = ast.parse(source)
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in constants:
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names if a.name in constants[node.module]]
        elif isinstance(node, ast.ImportFrom) and node.module == "ticketiq.storage":
            aliases.update({a.asname or a.name: f"ticketiq.storage.{a.name}" for a in node.names})
        elif isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names if a.name in constants})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module in constants and node.attr in constants[module]:
                found.append((node.lineno, f"{module}.{node.attr}"))
    return found


def test_no_query_is_named_outside_storage() -> None:
    constants = query_constants()
    found = []
    for path in outside_storage():
        source = path.read_text()
        where = path.relative_to(PACKAGE.parent)
        found += [f"{where}:{line}: {name}" for line, name in named_in_text(source)]
        found += [f"{where}:{line}: {name}" for line, name in named_through_constants(source, constants)]
    assert found == []


def test_the_reading_finds_a_name_in_a_string_a_comment_an_f_string_and_a_constant() -> None:
    source = (
        'await db.fetch_one("leader.lead", params)\n'
        "# then leases.renew\n"
        'name = f"knowledge.search{suffix}"\n'
        "self.gates.state()  # code, not a name: engine.gates.state\n"
        'rows = "jobs.listing"\n'
    )
    assert named_in_text(source) == [(1, "leader.lead"), (2, "leases.renew"), (3, "knowledge.search")]
    constants = {"ticketiq.storage.x_store": {"STEP"}}
    imported = "from ticketiq.storage.x_store import STEP, Other\nfrom ticketiq.storage import x_store as xs\nxs.STEP\n"
    assert named_through_constants(imported, constants) == [(1, "ticketiq.storage.x_store.STEP"),
                                                            (3, "ticketiq.storage.x_store.STEP")]  # fmt: skip


def test_the_stand_ins_name_only_their_own_statements() -> None:
    standins = PACKAGE / "standins"
    assert (standins / "queries.sql").exists()
    own = re.compile(r'"(standin\.\w+)"')
    named = {m.group(1) for p in standins.rglob("*.py") for m in own.finditer(p.read_text())}
    assert named and not named & set(QUERIES)
