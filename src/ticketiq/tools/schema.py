"""Check a model's tool arguments against the tool's JSON schema before anything is marked or sent.

The subset our tools use: `type` (one or a list), `properties`, `required`, `additionalProperties`
(false or a schema), `enum`, `minLength`/`maxLength`, `pattern`, `minimum`/`maximum`, `items`,
`minItems`/`maxItems`. Other keywords (`description`, `default`, ...) are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int, float),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def validate(schema: Mapping[str, Any], args: Any) -> str | None:
    """None when `args` fits `schema`; else every problem found, in one sentence per problem."""
    problems = _problems(schema, args, "")
    return "; ".join(problems) if problems else None


def _problems(schema: Mapping[str, Any], value: Any, path: str) -> list[str]:
    # Called for every call a model asks for, and nearly always finding nothing: what a problem's
    # sentence says (`_where`) is put together only once a problem is found.
    wanted = schema.get("type")
    if wanted is not None:
        if isinstance(wanted, str):
            fits = _is(value, wanted)
        else:
            wanted = list(wanted)
            fits = any(_is(value, name) for name in wanted)
        if not fits:
            names = [wanted] if isinstance(wanted, str) else wanted
            return [f"{_where(path)} must be {' or '.join(names)}, not {_json_type(value)}"]
    out: list[str] = []
    if "enum" in schema and value not in schema["enum"]:
        out.append(f"{_where(path)} must be one of {', '.join(repr(v) for v in schema['enum'])}")
    if isinstance(value, str):
        if "minLength" in schema or "maxLength" in schema or "pattern" in schema:
            out += _string(schema, value, _where(path))
    elif isinstance(value, dict):
        out += _object(schema, value, path)
    elif isinstance(value, list):
        out += _array(schema, value, path, _where(path))
    elif isinstance(value, int | float) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(f"{_where(path)} must be at least {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            out.append(f"{_where(path)} must be at most {schema['maximum']}")
    return out


def _where(path: str) -> str:
    return f"argument {path!r}" if path else "the arguments"


def _string(schema: Mapping[str, Any], value: str, where: str) -> list[str]:
    out = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(f"{where} must have at least {schema['minLength']} characters")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(f"{where} must have at most {schema['maxLength']} characters")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        out.append(f"{where} must match {schema['pattern']}")
    return out


def _array(schema: Mapping[str, Any], value: list[Any], path: str, where: str) -> list[str]:
    out = []
    if "minItems" in schema and len(value) < schema["minItems"]:
        out.append(f"{where} must have at least {schema['minItems']} items")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        out.append(f"{where} must have at most {schema['maxItems']} items")
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):
            out += _problems(items, item, f"{path}[{index}]")
    return out


def _object(schema: Mapping[str, Any], value: dict[str, Any], path: str) -> list[str]:
    out = []
    properties: Mapping[str, Any] = schema.get("properties", {})
    for name in schema.get("required", ()):
        if name not in value:
            out.append(f"argument {_join(path, name)!r} is required")
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            out += _problems(properties[name], item, _join(path, name))
        elif extra is False:
            allowed = ", ".join(properties) or "none"
            out.append(f"argument {_join(path, name)!r} is not allowed (allowed: {allowed})")
        elif isinstance(extra, Mapping):
            out += _problems(extra, item, _join(path, name))
    return out


def _is(value: Any, name: str) -> bool:
    if name not in _TYPES or (isinstance(value, bool) and name != "boolean"):
        return False  # True is an int to Python, never to JSON schema
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[name])


def _json_type(value: Any) -> str:
    for name in ("boolean", "null", "string", "object", "array"):
        if _is(value, name):
            return name
    if _is(value, "integer"):
        return "integer"
    return "number" if _is(value, "number") else type(value).__name__


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name
