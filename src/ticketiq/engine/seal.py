"""Checkpoint seals: HMAC-SHA256 over the run id, the step and the state's canonical JSON text, with a
key id so keys can rotate. The text is stored exactly as sealed, so no JSON round trip (jsonb turns
1e20 into 100000000000000000000) can make a good checkpoint fail verification.

Keys come from TICKETIQ_SEAL_KEYS (`id:secret,...`: the first signs, all verify) or, unset, from a key
generated once into TICKETIQ_HOME/seal.key with mode 0600. Secrets never leave this module.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ticketiq.errors import ConfigError, SealInvalid
from ticketiq.settings import Settings


def canonical(value: Any) -> bytes:
    """One byte string per JSON value: sorted keys, no spaces, UTF-8. orjson on the hot path (a
    checkpoint is serialized once a step); the standard library for what orjson refuses (integers
    beyond 64 bits). Verification never re-serializes: it checks the stored text itself."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


@dataclass(frozen=True)
class SealKeys:
    signing_id: str
    secrets: dict[str, bytes] = field(repr=False)

    def __repr__(self) -> str:  # never show a secret, even in a traceback
        return f"SealKeys(signing_id={self.signing_id!r}, ids={sorted(self.secrets)})"


def parse_keys(spec: str) -> SealKeys:
    keys: dict[str, bytes] = {}
    order: list[str] = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key_id, sep, secret = part.partition(":")
        if not sep or not key_id or not secret:
            raise ConfigError("TICKETIQ_SEAL_KEYS must be `id:secret,...` with a non-empty id and secret")
        if key_id in keys:
            raise ConfigError(f"TICKETIQ_SEAL_KEYS names key id {key_id!r} twice")
        keys[key_id] = secret.encode()
        order.append(key_id)
    if not order:
        raise ConfigError("TICKETIQ_SEAL_KEYS is set but holds no key")
    return SealKeys(signing_id=order[0], secrets=keys)


def load_keys(settings: Settings) -> SealKeys:
    if settings.seal_keys:
        return parse_keys(settings.seal_keys)
    path = Path(settings.home) / "seal.key"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        spec = f"k{secrets.token_hex(4)}:{secrets.token_hex(32)}"
        # O_EXCL: two processes starting together keep whichever key was written first.
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as handle:
                handle.write(spec)
    if path.stat().st_mode & 0o077:
        raise ConfigError(f"{path} must be readable by its owner only (chmod 600 {path})")
    return parse_keys(path.read_text().strip())


def _mac(secret: bytes, run_id: str, step: int, state: str | bytes) -> str:
    body = state if isinstance(state, bytes) else state.encode()
    # hmac.digest is OpenSSL's one-shot HMAC: the same value as hmac.new(...).hexdigest(), once a step.
    return hmac.digest(secret, f"{run_id}\n{step}\n".encode() + body, "sha256").hex()


def seal(keys: SealKeys, run_id: str, step: int, state: str | bytes) -> tuple[str, str]:
    """(seal, key id) over a checkpoint's state text, exactly as it is stored."""
    return _mac(keys.secrets[keys.signing_id], run_id, step, state), keys.signing_id


def verify(keys: SealKeys, run_id: str, step: int, state: str, seal_hex: str, key_id: str) -> None:
    """Raise SealInvalid unless the seal was made over exactly this checkpoint by a known key."""
    secret = keys.secrets.get(key_id)
    if secret is None:
        raise SealInvalid(run_id, f"sealed with unknown key id {key_id!r}")
    if not hmac.compare_digest(_mac(secret, run_id, step, state), seal_hex):
        raise SealInvalid(run_id, "seal does not match the checkpoint (altered after it was written)")
