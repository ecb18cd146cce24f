"""Text Postgres can store (I16): no NUL and no unpaired surrogate, in any string of any JSON value.

Requests that hold such text are refused (422, naming the field): `unstorable_at` finds where. Text
from the model, tools and vendors is made storable before it is written: `storable` replaces each
such character with U+FFFD and says whether it did, so the transcript can note it.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def is_storable(text: str) -> bool:
    return _UNSTORABLE.search(text) is None


def storable(value: Any) -> tuple[Any, bool]:
    """`value` with every unstorable character replaced, and whether any was. Keys are cleaned too.

    This runs on every model answer, argument and tool result, so the common case is one C call:
    orjson refuses a lone surrogate (it is no UTF-8) and writes a NUL as an escape; only a value that
    shows one (or that orjson cannot take) is walked."""
    if isinstance(value, str):
        if _UNSTORABLE.search(value) is None:
            return value, False
        return _UNSTORABLE.sub(REPLACEMENT, value), True
    if not isinstance(value, dict | list | tuple):
        return value, False
    try:
        if b"\\u0000" not in orjson.dumps(value):
            return value, False
    except (orjson.JSONEncodeError, TypeError):
        pass
    return _walk(value)


def _walk(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        return storable(value)
    if isinstance(value, dict):
        altered = False
        out: dict[Any, Any] = {}
        for key, item in value.items():
            clean_key, key_altered = storable(key) if isinstance(key, str) else (key, False)
            clean_item, item_altered = _walk(item)
            out[clean_key] = clean_item
            altered = altered or key_altered or item_altered
        return (out, True) if altered else (value, False)
    if isinstance(value, list | tuple):
        cleaned = [_walk(item) for item in value]
        if any(altered for _, altered in cleaned):
            return [item for item, _ in cleaned], True
        return value, False
    return value, False


def unstorable_at(value: Any, path: tuple[str | int, ...] = ()) -> tuple[str | int, ...] | None:
    """The path of the first string (or key) Postgres cannot store, or None when all are storable."""
    if isinstance(value, str):
        return None if _UNSTORABLE.search(value) is None else path
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and _UNSTORABLE.search(key) is not None:
                return (*path, key)
            found = unstorable_at(item, (*path, key))
            if found is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = unstorable_at(item, (*path, index))
            if found is not None:
                return found
    return None
