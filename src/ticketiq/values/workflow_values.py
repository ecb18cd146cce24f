"""What a workflow step reads: paths into the workflow's input and earlier steps' outputs, the
templates that put them into a step's arguments, and the conditions its `next` branches on.

All pure and small on purpose: a template is `{{ path }}` and nothing else (no filters, no calls), a
condition is comparisons joined by `and`/`or`/`not`. Nothing is ever evaluated as code.

Paths (dotted; a number segment indexes a list):

| path | value |
| --- | --- |
| `input`, `input.issue` | the workflow run's input (a JSON object) |
| `steps.<id>.output`, `steps.<id>.output.fields.status.name` | that step's latest output |
| `steps.<id>.visits` | how many times that step was executed so far (0 before its first) |
| `executed` | how many steps the run executed so far |

A template that is the whole string keeps its value's JSON type (`"{{ steps.read.output }}"` is the
object); inside other text a string goes in as it is and anything else as JSON. A path with no value
fails the step (`MissingValue`); in a condition it is `null`.

Conditions: `==`, `!=`, `<`, `<=`, `>`, `>=`, `contains`, `in`, `and`, `or`, `not`, parentheses;
operands are paths or literals (`"text"`, `'text'`, numbers, `true`, `false`, `null`). A lone operand
is tested for truth (null, false, 0, "", [] and {} are false). `<` and the like compare two numbers
or two strings; any other pair is false. Equality is JSON's: `true` is not `1`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

ROOTS = ("input", "steps", "executed")
_SEGMENT = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_-]*|[0-9]+)$")
TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")


class MissingValue(LookupError):
    """A path names nothing (yet): a key or an index that is not there, a step that has not run."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


class ExpressionError(ValueError):
    """A template or a condition that cannot be read; the message says what and where."""


# ----- paths --------------------------------------------------------------------------------------


def parse_path(text: str) -> tuple[str, ...]:
    parts = tuple(text.strip().split("."))
    if not text.strip() or not all(_SEGMENT.match(p) for p in parts):
        raise ExpressionError(f"{text!r} is not a path (dotted names, e.g. steps.read.output.summary)")
    return parts


def path_problem(path: tuple[str, ...], step_ids: frozenset[str]) -> str | None:
    """Why a path can never name a value of a run of a workflow with these steps; None when it can."""
    shown = ".".join(path)
    root = path[0]
    if root not in ROOTS:
        return f"{shown}: a path starts with input, steps or executed"
    if root == "executed" and len(path) > 1:
        return f"{shown}: executed is a number and has no fields"
    if root == "steps":
        if len(path) < 3:
            return f"{shown}: name a step and what of it, e.g. steps.<id>.output"
        if path[1] not in step_ids:
            return f"{shown}: no step {path[1]!r} in this workflow (steps: {', '.join(sorted(step_ids))})"
        if path[2] not in ("output", "visits"):
            return f"{shown}: a step has an output and visits, not {path[2]!r}"
        if path[2] == "visits" and len(path) > 3:
            return f"{shown}: visits is a number and has no fields"
    return None


@dataclass(frozen=True)
class Scope:
    """The values a step's templates and conditions read, as the run's state holds them."""

    input: Mapping[str, Any]
    outputs: Mapping[str, Any] = field(default_factory=dict)  # step id -> its latest output
    visits: Mapping[str, int] = field(default_factory=dict)  # step id -> times executed
    executed: int = 0

    def lookup(self, path: tuple[str, ...]) -> Any:
        root, rest = path[0], path[1:]
        if root == "executed":
            return self.executed
        if root == "input":
            return _walk(self.input, rest, path)
        if root == "steps" and len(rest) >= 2:
            step, what = rest[0], rest[1]
            if what == "visits":
                return self.visits.get(step, 0)
            if what == "output" and step in self.outputs:
                return _walk(self.outputs[step], rest[2:], path)
        raise MissingValue(".".join(path))


def _walk(value: Any, rest: tuple[str, ...], path: tuple[str, ...]) -> Any:
    for part in rest:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise MissingValue(".".join(path))
    return value


# ----- templates ----------------------------------------------------------------------------------


def template_paths(value: Any) -> Iterator[tuple[str, ...]]:
    """Every path the templates in `value` (a string, or lists and mappings of them) read. Raises
    ExpressionError for a template that is not a path, or braces left unclosed."""
    if isinstance(value, str):
        for match in TEMPLATE.finditer(value):
            yield parse_path(match.group(1))
        leftover = TEMPLATE.sub("", value)
        if "{{" in leftover or "}}" in leftover:
            raise ExpressionError(f"{value!r} holds '{{{{' or '}}}}' outside a template {{{{ path }}}}")
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from template_paths(item)
    elif isinstance(value, list):
        for item in value:
            yield from template_paths(item)


def render(value: Any, scope: Scope) -> Any:
    """`value` with every template replaced by what its path names in `scope` (MissingValue if none)."""
    if isinstance(value, str):
        whole = TEMPLATE.fullmatch(value)
        if whole is not None:
            return scope.lookup(parse_path(whole.group(1)))
        return TEMPLATE.sub(lambda m: _text(scope.lookup(parse_path(m.group(1)))), value)
    if isinstance(value, Mapping):
        return {k: render(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, scope) for v in value]
    return value


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def as_text(value: Any) -> str:
    """What an agent step is asked: a rendered input that is not a string goes as JSON."""
    return _text(value)


# ----- conditions ---------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
      | (?P<number>-?[0-9]+(?:\.[0-9]+)?(?![A-Za-z_.]))
      | (?P<op>==|!=|<=|>=|<|>|\(|\))
      | (?P<word>[A-Za-z_0-9][A-Za-z0-9_.-]*)
    )""",
    re.VERBOSE,
)
_COMPARISONS = ("==", "!=", "<", "<=", ">", ">=", "contains", "in")
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}
_SCALARS = (int, float, str, type(None))


@dataclass(frozen=True)
class Literal:
    value: Any


@dataclass(frozen=True)
class PathRef:
    path: tuple[str, ...]


@dataclass(frozen=True)
class Compare:
    op: str
    left: Node
    right: Node


@dataclass(frozen=True)
class Not:
    operand: Node


@dataclass(frozen=True)
class Both:
    left: Node
    right: Node


@dataclass(frozen=True)
class Either:
    left: Node
    right: Node


Node = Literal | PathRef | Compare | Not | Both | Either


@dataclass(frozen=True)
class Condition:
    text: str
    tree: Node

    def paths(self) -> list[tuple[str, ...]]:
        return list(_paths(self.tree))

    def holds(self, scope: Scope) -> bool:
        return _truthy(_value(self.tree, scope))


def parse_condition(text: str) -> Condition:
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("a condition is a non-empty string, e.g. steps.check.output.count < 3")
    tokens = _tokens(text)
    parser = _Parser(tokens, text)
    tree = parser.either()
    if parser.at < len(tokens):
        raise ExpressionError(f"{text!r}: unexpected {tokens[parser.at][1]!r}")
    return Condition(text, tree)


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    at = 0
    while at < len(text):
        if text[at:].strip() == "":
            break
        match = _TOKEN.match(text, at)
        if match is None or match.end() == at:
            raise ExpressionError(f"{text!r}: cannot read it from {text[at:].strip()!r}")
        kind = match.lastgroup
        assert kind is not None
        out.append((kind, match.group(kind)))
        at = match.end()
    return out


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], text: str) -> None:
        self.tokens = tokens
        self.text = text
        self.at = 0

    def _peek(self) -> tuple[str, str] | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def _word(self, word: str) -> bool:
        token = self._peek()
        if token is not None and token[0] == "word" and token[1] == word:
            self.at += 1
            return True
        return False

    def either(self) -> Node:
        node = self.both()
        while self._word("or"):
            node = Either(node, self.both())
        return node

    def both(self) -> Node:
        node = self.negated()
        while self._word("and"):
            node = Both(node, self.negated())
        return node

    def negated(self) -> Node:
        if self._word("not"):
            return Not(self.negated())
        return self.compared()

    def compared(self) -> Node:
        left = self.operand()
        token = self._peek()
        if token is not None and token[1] in _COMPARISONS and token[0] in ("op", "word"):
            self.at += 1
            return Compare(token[1], left, self.operand())
        return left

    def operand(self) -> Node:
        token = self._peek()
        if token is None:
            raise ExpressionError(f"{self.text!r}: ends where a value was expected")
        kind, text = token
        self.at += 1
        if kind == "op" and text == "(":
            node = self.either()
            closing = self._peek()
            if closing != ("op", ")"):
                raise ExpressionError(f"{self.text!r}: a '(' is not closed")
            self.at += 1
            return node
        if kind == "string":
            return Literal(_unquote(text))
        if kind == "number":
            return Literal(float(text) if "." in text else int(text))
        if kind == "word" and text in _LITERALS:
            return Literal(_LITERALS[text])
        if kind == "word" and text not in ("and", "or", "not", "contains", "in"):
            return PathRef(parse_path(text))
        raise ExpressionError(f"{self.text!r}: unexpected {text!r} where a value was expected")


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _paths(node: Node) -> Iterator[tuple[str, ...]]:
    if isinstance(node, PathRef):
        yield node.path
    elif isinstance(node, Compare | Both | Either):
        yield from _paths(node.left)
        yield from _paths(node.right)
    elif isinstance(node, Not):
        yield from _paths(node.operand)


def _value(node: Node, scope: Scope) -> Any:
    if isinstance(node, Literal):
        return node.value
    if isinstance(node, PathRef):
        try:
            return scope.lookup(node.path)
        except MissingValue:
            return None
    if isinstance(node, Not):
        return not _truthy(_value(node.operand, scope))
    if isinstance(node, Both):
        return _truthy(_value(node.left, scope)) and _truthy(_value(node.right, scope))
    if isinstance(node, Either):
        return _truthy(_value(node.left, scope)) or _truthy(_value(node.right, scope))
    return compare(node.op, _value(node.left, scope), _value(node.right, scope))


def compare(op: str, left: Any, right: Any) -> bool:
    if op == "==":
        return same(left, right)
    if op == "!=":
        return not same(left, right)
    if op == "contains":
        return contains(left, right)
    if op == "in":
        return contains(right, left)
    if (_number(left) and _number(right)) or (isinstance(left, str) and isinstance(right, str)):
        if op == "<":
            return bool(left < right)
        if op == "<=":
            return bool(left <= right)
        if op == ">":
            return bool(left > right)
        return bool(left >= right)
    return False


def same(left: Any, right: Any) -> bool:
    """JSON equality: a boolean equals only a boolean (Python's True == 1 is not JSON's)."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left is right
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(same(left[k], right[k]) for k in left)
    return type(left) in _SCALARS and type(right) in _SCALARS and bool(left == right)


def contains(container: Any, item: Any) -> bool:
    """A substring of a string, an element of a list, a key of an object."""
    if isinstance(container, str):
        return isinstance(item, str) and item in container
    if isinstance(container, list):
        return any(same(element, item) for element in container)
    if isinstance(container, dict):
        return isinstance(item, str) and item in container
    return False


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and value != [] and value != {}
