"""Step idempotency keys (I11): derived from what identifies the step, never from the clock or chance.

A key is at most 25 characters so that it fits every vendor's field, Discord's nonce being the
shortest. 23 base32 characters of SHA-256 keep 115 bits: collisions are not a practical concern.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from json.encoder import encode_basestring

KEY_LENGTH = 25
# A provider id that is only a position is no identity: two different steps both send `call_0`.
_POSITION_ONLY = re.compile(r"^(call_)?\d+$")


def is_position_only(provider_call_id: str) -> bool:
    return not provider_call_id or bool(_POSITION_ONLY.match(provider_call_id))


# The standard library, not orjson: a key must come out the same in every process and version.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# Base32's alphabet (RFC 4648), lower case, two characters for each 10 bits.
_PAIRS = tuple(a + b for a in "abcdefghijklmnopqrstuvwxyz234567" for b in "abcdefghijklmnopqrstuvwxyz234567")


def _compact(prefix: str, parts: list[object]) -> str:
    """`_COMPACT.encode([prefix, *parts])`. Parts that are all strings and ints (a step's key, once a
    step) are put together here from the encoder's own pieces: its C string form and int's repr,
    joined as its C list encoder joins them, the same text at a fifth of the cost. Anything else
    (a bool is an int to Python, not to JSON) goes through the encoder."""
    pieces = [encode_basestring(prefix)]
    for part in parts:
        if type(part) is str:
            pieces.append(encode_basestring(part))
        elif type(part) is int:
            pieces.append(int.__repr__(part))
        else:
            return _COMPACT.encode([prefix, *parts])
    return "[" + ",".join(pieces) + "]"


# Copied for each key: hashlib.sha256(data) sets up a new OpenSSL digest each call, which cost more in
# place (cold, between a step's other work) than copying one set up once.
_SHA256 = hashlib.sha256()


def _derive(prefix: str, parts: list[object]) -> str:
    sha = _SHA256.copy()
    sha.update(_compact(prefix, parts).encode())
    digest = sha.digest()
    # The base32 of the digest's first 15 bytes (each 5 bytes give 8 characters on their own, so these
    # are the first 24 characters of the whole digest's encoding), 10 bits at a time: the same keys as
    # ever, without base64.b32encode's Python loop.
    b = int.from_bytes(digest[:15], "big")
    pairs = _PAIRS
    text = (
        pairs[b >> 110] + pairs[b >> 100 & 1023] + pairs[b >> 90 & 1023] + pairs[b >> 80 & 1023]
        + pairs[b >> 70 & 1023] + pairs[b >> 60 & 1023] + pairs[b >> 50 & 1023] + pairs[b >> 40 & 1023]
        + pairs[b >> 30 & 1023] + pairs[b >> 20 & 1023] + pairs[b >> 10 & 1023] + pairs[b & 1023]
    )  # fmt: skip
    return prefix + text[: KEY_LENGTH - len(prefix)]


def run_call_key(correlation_id: str, agent_loop: str, steps_taken: int, provider_call_id: str) -> str | None:
    """The key of an agent run's tool call, or None when the provider id is only a position."""
    if is_position_only(provider_call_id):
        return None
    return _derive("tq", [correlation_id, agent_loop, steps_taken, provider_call_id])


def workflow_step_key(workflow_run_id: str, step_id: str, steps_executed: int) -> str:
    """A retry of the step sends the same key; a loop back to it (more steps executed) a new one."""
    return _derive("tw", [workflow_run_id, step_id, steps_executed])


def approval_key(approval_id: str) -> str:
    """An approved call sends this key however often it is sent."""
    return _derive("ta", [approval_id])


def inspector_key(principal: str, idempotency_key: str) -> str:
    """An ad hoc call asked with an Idempotency-Key: the request names the call, so its retry after a
    crash has the same key and finds the write it began (never sent twice)."""
    return _derive("ti", [principal, idempotency_key])


def fresh_key() -> str:
    """For a call outside every scope (an ad hoc call, a position-only id): new per call."""
    return "tf" + secrets.token_hex(16)[: KEY_LENGTH - 2]
