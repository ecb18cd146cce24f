"""pg_dump's `--schema-only` text laid out for a reader: each object with what belongs to it. Pure.

pg_dump orders a dump for restoring it: every table first, then every default, every constraint, every
index, every trigger, every foreign key, so a table's definition is spread over the whole file. Here each
entry is put with the object it belongs to (a table with its comments, owned sequences, defaults,
constraints, indexes and triggers), objects are grouped by kind (functions, sequences, tables, views, ...)
and sorted by name. Entries are kept as pg_dump wrote them, and in its order within an object.

What varies by run or machine goes: the banner with the versions, the session settings before the
first entry, pg_dump's random `\\restrict` key, each entry's "-- Name: ...; Owner: ..." label (the
statement says it again). Nothing else is dropped: an entry this module cannot place is its own object
at the end, and a line before the first entry that is not one of pg_dump's known ones is an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_LABEL = re.compile(r"^-- Name: (?P<name>.*); Type: (?P<kind>[A-Z ]+); Schema: (?P<schema>.*); Owner: .*$")
_END = "-- PostgreSQL database dump complete"
# Lines of pg_dump that say how it ran, not what the schema is.
_SESSION = re.compile(
    r"^(|--|-- PostgreSQL database dump( complete)?|-- Dumped (from database|by pg_dump) version .*"
    r"|\\(un)?restrict \S+|SET \w+ = .*;|SELECT pg_catalog\.set_config\(.*\);)$"
)
# Objects that stand on their own, in the order their kinds are shown; any other kind follows them.
KINDS = (
    "SCHEMA",
    "EXTENSION",
    "TYPE",
    "DOMAIN",
    "FUNCTION",
    "PROCEDURE",
    "AGGREGATE",
    "SEQUENCE",
    "TABLE",
    "VIEW",
    "MATERIALIZED VIEW",
)
_RELATIONS = ("TABLE", "VIEW", "MATERIALIZED VIEW")
# Entries whose label names "<relation> <object>".
_ON_RELATION = ("DEFAULT", "CONSTRAINT", "CHECK CONSTRAINT", "FK CONSTRAINT", "TRIGGER", "POLICY", "RULE")
_INDEX_ON = re.compile(r"^CREATE (?:UNIQUE )?INDEX \S+ ON (?:ONLY )?(?P<schema>[^.\s]+)\.(?P<name>\S+) USING ")
_SEQUENCE_OF = re.compile(
    r"^ALTER (?:SEQUENCE \S+ OWNED BY (?P<schema>[^.\s]+)\.(?P<name>[^.\s]+)\.\S+;"
    r"|TABLE (?:ONLY )?(?P<schema2>[^.\s]+)\.(?P<name2>\S+) ALTER COLUMN )"
)


@dataclass(frozen=True)
class Entry:
    """One object of the dump: its label's kind, schema and name, and its statements."""

    kind: str
    schema: str
    name: str
    body: str


Key = tuple[str, str, str]  # (kind, schema, name) of an object that stands on its own


def parse(dump: str) -> list[Entry]:
    """The entries of a plain-format dump, in its order; raises ValueError on a line it does not know."""
    lines = dump.splitlines()
    entries: list[Entry] = []
    label: re.Match[str] | None = None
    body: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i] == "--" and i + 2 < len(lines) and lines[i + 2] == "--":
            found = _LABEL.match(lines[i + 1])
            if found or lines[i + 1] == _END:
                if label is not None:
                    entries.append(_entry(label, body))
                label, body = found, []
                i += 3
                continue
        if label is None:
            if not _SESSION.match(lines[i]):
                raise ValueError(f"pg_dump wrote a line outside any object that is not a known setting: {lines[i]!r}")
        else:
            body.append(lines[i])
        i += 1
    if label is not None:
        raise ValueError("the dump has no end: pg_dump stopped before '-- PostgreSQL database dump complete'")
    return entries


def _entry(label: re.Match[str], body: list[str]) -> Entry:
    while body and _SESSION.match(body[-1]):  # a setting pg_dump makes before the next entry
        body.pop()
    text = "\n".join(body).strip("\n")
    return Entry(label["kind"], label["schema"], label["name"], text)


def _unquote(name: str) -> str:
    return name.replace('"', "")


def _owners(entries: list[Entry]) -> dict[Key, Key]:
    """Where each object that can belong to another goes: a relation to itself, an index and an owned
    sequence to their relation."""
    relations = {(e.schema, _unquote(e.name)): e.kind for e in entries if e.kind in _RELATIONS}
    owners: dict[Key, Key] = {}
    for e in entries:
        if e.kind in _RELATIONS:
            owners[(e.kind, e.schema, _unquote(e.name))] = (e.kind, e.schema, _unquote(e.name))
    for e in entries:
        if e.kind == "INDEX":
            found, what = _INDEX_ON.match(e.body), "INDEX"
        elif e.kind in ("SEQUENCE", "SEQUENCE OWNED BY"):  # owned by a column, or an identity column's
            found, what = _SEQUENCE_OF.match(e.body), "SEQUENCE"
        else:
            continue
        if found is None:
            continue
        schema = found["schema"] or found["schema2"]
        name = _unquote(found["name"] or found["name2"])
        if (schema, name) in relations:
            owners[(what, e.schema, _unquote(e.name))] = (relations[(schema, name)], schema, name)
    return owners


def _target(entry: Entry) -> Key:
    """The object an entry is about, as its label names it."""
    if entry.kind in _ON_RELATION:
        relation = entry.name.split(" ", 1)[0]
        return ("TABLE", entry.schema, _unquote(relation))
    if entry.kind == "SEQUENCE OWNED BY":
        return ("SEQUENCE", entry.schema, _unquote(entry.name))
    if entry.kind != "COMMENT":
        return (entry.kind, entry.schema, _unquote(entry.name))
    what, _, rest = entry.name.partition(" ")
    for kind in sorted(KINDS, key=len, reverse=True):  # "MATERIALIZED VIEW v" before "VIEW v"
        if entry.name.startswith(kind + " "):
            return (kind, entry.schema, _unquote(entry.name[len(kind) + 1 :]))
    if what == "COLUMN":
        return ("TABLE", entry.schema, _unquote(rest.rsplit(".", 1)[0]))
    if " ON " in rest:  # CONSTRAINT c ON t, TRIGGER t ON t, POLICY p ON t, RULE r ON t
        return ("TABLE", entry.schema, _unquote(rest.rsplit(" ON ", 1)[1]))
    return (what, entry.schema, _unquote(rest))


def group(entries: list[Entry]) -> dict[Key, list[Entry]]:
    """Each entry under the object it belongs to; an entry of nothing known stands on its own."""
    owners = _owners(entries)
    relation_kinds = {key[1:]: key[0] for key in owners.values()}
    groups: dict[Key, list[Entry]] = {}
    for entry in entries:
        target = _target(entry)
        if target[0] == "TABLE" and target[1:] in relation_kinds:  # a trigger or rule may be on a view
            target = (relation_kinds[target[1:]], *target[1:])
        groups.setdefault(owners.get(target, target), []).append(entry)
    return groups


def _order(key: Key) -> tuple[int, str, str, str]:
    kind, schema, name = key
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind, schema, name)


def layout(entries: list[Entry]) -> str:
    """The entries as one text: objects by kind and name, each under a heading, then its entries."""
    groups = group(entries)
    blocks = [_block(key, groups[key]) for key in sorted(groups, key=_order)]
    return "\n\n\n".join(blocks) + "\n"


def _block(key: Key, entries: Iterable[Entry]) -> str:
    kind, schema, name = key
    heading = f"-- {kind} {schema}.{name}" if schema != "-" else f"-- {kind} {name}"
    return "\n\n".join([heading, *(e.body for e in entries if e.body)])
