"""Checkpoint seals: HMAC-SHA256 with a key id, so tampering is detected and keys can rotate (I17).

A seal covers the run id, the step, the attempt that wrote the checkpoint, the loss count it knew, the
seal of the checkpoint it replaced, and the state's canonical JSON text exactly as stored (so no JSON
round trip can make a good checkpoint fail). An edited checkpoint, a loss count reset below what was
sealed, or a checkpoint put back in place of a later one (rows written after it remain; see the
driver) fails verification on resume. Checkpoints sealed before the chain (format 1) cover the run
id, the step and the state only, and verify as such until their next write.

Keys come from TICKETIQ_SEAL_KEYS (`id:secret,...`: the first signs, all verify) or, unset, from a key
generated once into TICKETIQ_HOME/seal.key (mode 0600, written atomically). At start a process checks
the cluster's key probe: a fixed text sealed by the key that signs. Secrets never leave this module.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import hmac
import json
import os
import secrets
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from ticketiq.errors import ConfigError, SealInvalid
from ticketiq.settings import Settings

PROBE_TEXT = b"ticketiq seal key probe\n"
# The seal format this release writes (`checkpoints.seal_format`; 2 chains the attempt, the losses and the
# previous seal) and the newest it verifies; format 1 (run id, step and state only) is still verified.
SEAL_FORMAT = 2


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


class Chain(NamedTuple):
    """What a seal covers besides the state text (I17). A tuple: made for every checkpoint."""

    run_id: str
    step: int
    attempt: int
    losses: int
    prev_seal: str | None


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
        _write_key_file(path, f"k{secrets.token_hex(4)}:{secrets.token_hex(32)}")
    if path.stat().st_mode & 0o077:
        raise ConfigError(f"{path} must be readable by its owner only (chmod 600 {path})")
    text = path.read_text().strip()
    if not text:
        raise ConfigError(f"{path} is empty; delete it to have a new key generated, or set TICKETIQ_SEAL_KEYS")
    return parse_keys(text)


def _write_key_file(path: Path, spec: str) -> None:
    """Write the whole key to a private temporary file, then link it into place: the file appears
    complete or not at all, and of two processes starting together the first link wins and the other
    reads the winner's key (never an empty file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".seal.key.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(spec)
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
    finally:
        os.unlink(tmp)


def _mac(secret: bytes, chain: Chain, state: str | bytes, seal_format: int = SEAL_FORMAT) -> str:
    body = state if isinstance(state, bytes) else state.encode()
    if seal_format == 2:
        head = f"v2\n{chain.run_id}\n{chain.step}\n{chain.attempt}\n{chain.losses}\n{chain.prev_seal or ''}\n"
    elif seal_format == 1:
        head = f"{chain.run_id}\n{chain.step}\n"
    else:
        # A newer release's seal is never checked as if it were ours (that would call it tampered): the
        # driver leaves such a checkpoint before it gets here (resume.format_unknown).
        raise ValueError(f"seal format {seal_format} is not one this release knows")
    return _hmac_hex(secret, head.encode() + body)


@functools.lru_cache(maxsize=16)
def _keyed(secret: bytes) -> hmac.HMAC:
    """The key's HMAC with nothing fed yet; each seal copies it. hmac.digest, OpenSSL's one-shot HMAC,
    looks HMAC up in OpenSSL's provider tables on every call (EVP_MAC_fetch): in place, between the
    steps' other work, that took ~27 us a seal, most of a step's hashing."""
    return hmac.new(secret, digestmod=hashlib.sha256)


def _hmac_hex(secret: bytes, data: bytes) -> str:
    """HMAC-SHA256 in hex: the same value as hmac.digest(secret, data, "sha256").hex()."""
    mac = _keyed(secret).copy()
    mac.update(data)
    return mac.hexdigest()


def seal(keys: SealKeys, chain: Chain, state: str | bytes) -> tuple[str, str]:
    """(seal, key id) over a checkpoint's state text, exactly as it is stored, and its chain."""
    return _mac(keys.secrets[keys.signing_id], chain, state), keys.signing_id


def verify(
    keys: SealKeys, chain: Chain, state: str, seal_hex: str, key_id: str, seal_format: int = SEAL_FORMAT
) -> None:
    """Raise SealInvalid unless the seal was made over exactly this checkpoint by a known key."""
    secret = keys.secrets.get(key_id)
    if secret is None:
        raise SealInvalid(chain.run_id, f"sealed with unknown key id {key_id!r} (TICKETIQ_SEAL_KEYS lacks it)")
    if not hmac.compare_digest(_mac(secret, chain, state, seal_format), seal_hex):
        raise SealInvalid(chain.run_id, "seal does not match the checkpoint (altered after it was written)")


def check_counters(run_id: str, attempt: int, losses: int, sealed_attempt: int, sealed_losses: int) -> None:
    """I17: the attempt and the loss count only grow, and each loss raised the attempt. A count below
    what the seal covers was reset; more losses than takes since the seal were made up."""
    if attempt <= sealed_attempt:
        raise SealInvalid(run_id, f"attempt {attempt} is not above the sealed attempt {sealed_attempt}")
    if losses < sealed_losses:
        raise SealInvalid(run_id, f"loss count {losses} is below the sealed count {sealed_losses} (it was reset)")
    if losses - sealed_losses > attempt - sealed_attempt:
        raise SealInvalid(run_id, f"loss count {losses} grew more than the attempt since the seal")


def probe(keys: SealKeys) -> tuple[str, str]:
    """(key id, seal) of the cluster's key probe, made with the signing key."""
    return keys.signing_id, _hmac_hex(keys.secrets[keys.signing_id], PROBE_TEXT)


def check_probe(keys: SealKeys, key_id: str, seal_hex: str) -> None:
    """Raise ConfigError unless these keys verify the probe the cluster's signing key made."""
    secret = keys.secrets.get(key_id)
    if secret is None:
        raise ConfigError(
            f"this cluster's checkpoints are sealed with key id {key_id!r}, which TICKETIQ_SEAL_KEYS of this "
            f"process lacks (it has {sorted(keys.secrets)}): give every process the same TICKETIQ_SEAL_KEYS"
        )
    if not hmac.compare_digest(_hmac_hex(secret, PROBE_TEXT), seal_hex):
        raise ConfigError(
            f"key id {key_id!r} in TICKETIQ_SEAL_KEYS has another secret than the key this cluster signs with: "
            "give every process the same TICKETIQ_SEAL_KEYS"
        )


def _answer_mac(secret: bytes, run_id: str, answer: str) -> str:
    return _hmac_hex(secret, f"answer\n{run_id}\n".encode() + answer.encode())


def seal_answer(keys: SealKeys, run_id: str, answer: str) -> tuple[str, str]:
    """I12: (seal, key id) over a kept answer: the run id and the text, so an answer edited, or moved to
    another run, is never handed on."""
    return _answer_mac(keys.secrets[keys.signing_id], run_id, answer), keys.signing_id


def verify_answer(keys: SealKeys, run_id: str, answer: str, seal_hex: str, key_id: str) -> None:
    secret = keys.secrets.get(key_id)
    if secret is None:
        raise SealInvalid(run_id, f"kept answer sealed with unknown key id {key_id!r} (TICKETIQ_SEAL_KEYS lacks it)")
    if not hmac.compare_digest(_answer_mac(secret, run_id, answer), seal_hex):
        raise SealInvalid(run_id, "the kept answer does not match its seal (altered after it was written)")
