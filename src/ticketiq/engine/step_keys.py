"""Step idempotency keys (I11): derived from what identifies the step, never from the clock or chance.

A key is at most 25 characters so that it fits every vendor's field, Discord's nonce being the
shortest. 23 base32 characters of SHA-256 keep 115 bits: collisions are not a practical concern.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import secrets

KEY_LENGTH = 25
# A provider id that is only a position is no identity: two different steps both send `call_0`.
_POSITION_ONLY = re.compile(r"^(call_)?\d+$")


def is_position_only(provider_call_id: str) -> bool:
    return not provider_call_id or bool(_POSITION_ONLY.match(provider_call_id))


# The standard library, not orjson: a key must come out the same in every process and version.
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _derive(prefix: str, parts: list[object]) -> str:
    text = _COMPACT.encode([prefix, *parts])
    digest = hashlib.sha256(text.encode()).digest()
    # Base32 turns each 5 bytes into 8 characters on their own, so the first 15 bytes give the first
    # 24 characters of the whole digest's encoding, at a third of the cost: the same keys as ever.
    return prefix + base64.b32encode(digest[:15]).decode().lower()[: KEY_LENGTH - len(prefix)]


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
