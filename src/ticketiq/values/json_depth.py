"""How deep a JSON text nests, judged before anything parses it (I16: no outside input can make a
statement, or a step, fail).

Whatever reads a parsed JSON value recurses once a level or more (json.loads, the storable walk,
pydantic, protobuf, the checkpoint's serialization), against Python's limit of 1,000 frames: a text
nested deep enough is a RecursionError wherever it is read. Outside text comes as request bodies, the
model's tool-call arguments and vendors' answers; each is measured here, without recursion, before it
is parsed: the API refuses a body nested deeper than `MAX_DEPTH` (422 naming `body`), a call whose
arguments nest deeper is told so as its result, and a vendor's answer that nests deeper is kept as its
text. Pure, no I/O.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

# How deep outside JSON may nest (each array or object one level). The bodies the API takes (a Jira
# issue event, a Teams activity with its cards, an A2A message with its metadata), tool arguments and
# vendors' answers nest a handful of levels: 64 is far above any real one, far below the 1,000 frames.
MAX_DEPTH = 64

_STRINGS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")  # UTF-8: no other character holds these bytes
_LEVEL = tuple({ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}.get(b, 0) for b in range(256))
_CHUNK = 1 << 14  # brackets counted at a time


def too_deep(body: bytes | str) -> bool:
    """Whether the JSON text `body` nests deeper than `MAX_DEPTH`, found without parsing it."""
    # Too few brackets to nest that deep: in every encoding json.loads reads, a bracket holds its byte.
    if isinstance(body, str):
        if body.count("[") + body.count("{") <= MAX_DEPTH:
            return False
        return nesting(body, stop_above=MAX_DEPTH) > MAX_DEPTH
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return False
    try:
        text = body.decode(json.detect_encoding(body), "surrogatepass")  # as json.loads reads bytes
    except (UnicodeDecodeError, LookupError):
        return False  # json.loads refuses it before it parses anything
    return nesting(text, stop_above=MAX_DEPTH) > MAX_DEPTH


def nesting(text: str, stop_above: int | None = None) -> int:
    """How deep a JSON text nests (arrays and objects, brackets inside strings not counted): the depth
    `json.loads` recurses to, counted without recursion. 0 for a text that is no array or object: it
    cannot nest (`json.loads` takes or refuses it without recursing). With `stop_above`, counting may
    stop once the depth passed it (a body nested a million deep costs no more than one nested 65 deep)."""
    if text.lstrip(" \t\n\r")[:1] not in ("[", "{"):
        return 0
    brackets = _STRINGS.sub("", text).encode("utf-8", "surrogatepass").translate(None, _NOT_BRACKETS)
    depth = deepest = 0
    for start in range(0, len(brackets), _CHUNK):
        chunk = brackets[start : start + _CHUNK]
        deepest = max(deepest, max(accumulate(map(_LEVEL.__getitem__, chunk), initial=depth)))
        if stop_above is not None and deepest > stop_above:
            break
        depth += chunk.count(b"[") + chunk.count(b"{") - chunk.count(b"]") - chunk.count(b"}")
    return deepest
