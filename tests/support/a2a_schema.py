"""The A2A protocol's JSON Schema of version 1.0, to check what the A2A entry serves against the spec itself.

`a2a_v1_schema.json` is the A2A project's schema bundle of protocol 1.0.0: its build
(`scripts/proto_to_json_schema.sh` in github.com/a2aproject/A2A, bufbuild's protoc-gen-jsonschema) makes it
from `specification/a2a.proto`, and publishes it with the spec's site without committing it, so this copy is
the one the A2A conformance suite ships (github.com/a2aproject/a2a-tck, branch 1.0-dev, commit 40b279a,
`specification/a2a.json`), whose `a2a.proto` is the A2A repository's tag v1.0.0 (1736957) byte for byte.
Taken unchanged: to refresh it, take the suite's again.

The bundle names each message once, under its title (`Agent Card`), and refers to it by its proto name
(`lf.a2a.v1.AgentCard.jsonschema.json`); `errors` resolves those through a registry of its own.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

SCHEMA = Path(__file__).with_name("a2a_v1_schema.json")
PACKAGES = ("lf.a2a.v1.", "google.protobuf.")


@cache
def _bundle() -> tuple[dict[str, Any], Registry[Any]]:
    definitions: dict[str, Any] = json.loads(SCHEMA.read_text())["definitions"]
    registry: Registry[Any] = Registry()
    for title, schema in definitions.items():
        name = title.replace(" ", "")
        for package in PACKAGES:
            resource = Resource.from_contents(schema, default_specification=DRAFT202012)
            registry = registry.with_resource(f"{package}{name}.jsonschema.json", resource)
    return definitions, registry


def errors(instance: Any, definition: str) -> list[str]:
    """Where `instance` breaks the schema's `definition` (a title, `Agent Card`): one line each, its JSON
    path first; empty when it validates."""
    definitions, registry = _bundle()
    validator = Draft202012Validator(definitions[definition], registry=registry)
    return sorted(f"{e.json_path}: {e.message}" for e in validator.iter_errors(instance))
