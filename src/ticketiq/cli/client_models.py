"""`python -m ticketiq.cli.client_models --write` (`make client-models`): writes `ticketiq/client/models.py`,
the typed results of `ticketiq.client`, from the app's OpenAPI document, their one source (the route models,
and `entries/answers.py` for the answers the routes build as dicts). tests/unit/test_client_models.py writes
them again and fails while the file differs: an API changed without `make client-models`.

It lives here, not in `client/`: it reads the server's routes, which only the top of the house may import.
The rendering (`module_text`) is pure, over the document.
"""

from __future__ import annotations

import argparse
import json
import keyword
import sys
import textwrap
from pathlib import Path
from typing import Any

MODELS = Path(__file__).resolve().parents[1] / "client" / "models.py"

# The operations whose answers the client returns: each 2xx JSON answer's models, and every model they name.
OPERATIONS = [
    ("post", "/v1/runs"),
    ("get", "/v1/runs"),
    ("get", "/v1/runs/{run_id}"),
    ("get", "/v1/runs/{run_id}/timeline"),
    ("post", "/v1/runs/{run_id}/input"),
    ("post", "/v1/runs/{run_id}/stop"),
    ("post", "/v1/runs/{run_id}/resume"),
    ("get", "/v1/approvals"),
    ("post", "/v1/approvals/{approval_id}"),
    ("get", "/v1/jobs/{job_id}"),
]

HEADER = '''"""The typed results of `ticketiq.client`: the API's answers, written from its OpenAPI document by
`make client-models` (`python -m ticketiq.cli.client_models --write`). Do not edit: write them again.

TypedDicts over the answers' JSON as it comes: times are ISO 8601 text, ids are UUIDs as text. Each is
written after the ones it names, and its annotations are evaluated (no `from __future__ import annotations`):
so `NotRequired` is seen at run time too, in `__optional_keys__`.
"""

{imports}

__all__ = [
{names}
]
'''


def openapi() -> dict[str, Any]:
    """The app's OpenAPI document, as `GET /openapi.json` answers it (no process, no database)."""
    from ticketiq.entries.api import create_app
    from ticketiq.settings import Settings

    document: dict[str, Any] = create_app(Settings()).openapi()
    return document


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def type_of(schema: dict[str, Any]) -> str:
    """The Python type of a JSON schema, as the TypedDicts spell it."""
    if "$ref" in schema:
        return _ref_name(schema["$ref"])
    if "anyOf" in schema or "oneOf" in schema:
        kinds: list[str] = []
        for one in schema.get("anyOf") or schema["oneOf"]:
            named = type_of(one)
            if named not in kinds:
                kinds.append(named)
        if "None" in kinds:  # None last, as the house writes it
            kinds = [k for k in kinds if k != "None"] + ["None"]
        return " | ".join(kinds)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum") or [schema["const"]]
        return f"Literal[{', '.join(json.dumps(v) for v in values)}]"
    kind = str(schema.get("type"))
    if kind == "array":
        return f"list[{type_of(schema.get('items') or {})}]"
    if kind == "object":
        extra = schema.get("additionalProperties")
        return f"dict[str, {type_of(extra)}]" if isinstance(extra, dict) and extra else "dict[str, Any]"
    return {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "null": "None"}.get(kind, "Any")


def _named(schema: Any) -> list[str]:
    """The names of the models a schema refers to, in order of appearance."""
    if isinstance(schema, dict):
        found = [_ref_name(schema["$ref"])] if "$ref" in schema else []
        for value in schema.values():
            found += [n for n in _named(value) if n not in found]
        return found
    if isinstance(schema, list):
        found = []
        for value in schema:
            found += [n for n in _named(value) if n not in found]
        return found
    return []


def models_of(document: dict[str, Any]) -> list[str]:
    """The models the operations answer with, each after the models it names (so it can be written)."""
    ordered: list[str] = []
    components = document["components"]["schemas"]

    def visit(name: str) -> None:
        if name in ordered:
            return
        for inner in _named(components[name].get("properties", {})):
            visit(inner)
        ordered.append(name)

    for method, path in OPERATIONS:
        for status, response in sorted(document["paths"][path][method]["responses"].items()):
            if status.startswith("2"):
                for name in _named(response.get("content", {}).get("application/json", {}).get("schema", {})):
                    visit(name)
    return ordered


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())


def _comment(text: str, indent: str, mark: str) -> list[str]:
    return textwrap.wrap(text, 116 - len(indent), initial_indent=indent + mark, subsequent_indent=indent + mark)


def model_text(name: str, schema: dict[str, Any]) -> str:
    """One TypedDict: class syntax, or the functional form when a field's name is a Python keyword (written as
    `ruff format` writes it, so the file is left as it is by the formatter)."""
    required = set(schema.get("required", []))
    fields = []
    for field, spec in schema.get("properties", {}).items():
        kind = type_of(spec)
        fields.append((field, kind if field in required else f"NotRequired[{kind}]"))
    about = _first_paragraph(schema.get("description"))
    if any(keyword.iskeyword(f) or not f.isidentifier() for f, _ in fields):
        lines = _comment(about, "", "# ") if about else []
        lines += [f"{name} = TypedDict(", f'    "{name}",', "    {"]
        lines += [f'        "{field}": {kind},' for field, kind in fields]
        return "\n".join([*lines, "    },", ")"])
    lines = [f"class {name}(TypedDict):"]
    if about:
        wrapped = textwrap.wrap(f'"""{about}"""', 112, initial_indent="    ", subsequent_indent="    ")
        lines += [*wrapped, ""]
    lines += [f"    {field}: {kind}" for field, kind in fields] or ["    pass"]
    return "\n".join(lines)


def module_text(document: dict[str, Any]) -> str:
    names = models_of(document)
    components = document["components"]["schemas"]
    body = "\n\n\n".join(model_text(name, components[name]) for name in names)
    used = [n for n in ("Any", "Literal", "NotRequired") if f"{n}[" in body or f" {n}," in body or f"{n}]" in body]
    imports = f"from typing import {', '.join([*used, 'TypedDict'])}"
    head = HEADER.replace("{imports}", imports).replace("{names}", "\n".join(f'    "{n}",' for n in sorted(names)))
    return f"{head}\n\n{body}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ticketiq.cli.client_models", description=__doc__)
    parser.add_argument("--write", action="store_true", help=f"write {MODELS.name} (else print it)")
    args = parser.parse_args(argv)
    text = module_text(openapi())
    if args.write:
        MODELS.write_text(text)
        print(f"wrote {MODELS}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
