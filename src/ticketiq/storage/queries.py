"""Named SQL statements, loaded once from `queries/*.sql` (`-- name: <area>.<name>` blocks)."""

from __future__ import annotations

import re
from pathlib import Path

_HEADER = re.compile(r"^--\s*name:\s*(\S+)\s*$", re.MULTILINE)


def parse(text: str, area: str) -> dict[str, str]:
    """Split one file into its named statements, each keyed `<area>.<name>`."""
    out: dict[str, str] = {}
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        key = f"{area}.{name}"
        if key in out:
            raise ValueError(f"query {key} is defined twice")
        out[key] = body.strip().rstrip(";")
    return out


def load(folder: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(folder.glob("*.sql")):
        out.update(parse(path.read_text(), path.stem))
    return out


QUERIES = load(Path(__file__).parent / "queries")
