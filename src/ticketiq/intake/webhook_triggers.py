"""Webhook triggers: what a name, a secret and a delivery id may be, how a secret is kept, and the key
that makes one delivery one run. Pure, no I/O.

Secrets are needed in clear to compute an HMAC, so a hash will not do: each is kept encrypted with
AES-256-GCM under a key derived from the cluster's seal key (TICKETIQ_SEAL_KEYS, or the key file in
TICKETIQ_HOME), with the trigger's name as associated data, so a database dump, a backup or a
read-only role shows no secret and a ciphertext moved to another trigger does not open. Its key id is
kept beside it: a seal key rotated in (first in TICKETIQ_SEAL_KEYS) encrypts new secrets, and older
ones open while their key id is still listed. A secret is never logged, echoed or returned.
"""

from __future__ import annotations

import hmac
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ticketiq.engine.seal import SealKeys
from ticketiq.errors import Conflict, NotFound, RequestError
from ticketiq.storage.trigger_store import SecretState

# Like token names (they share the audit's actor column as `trigger:<name>`): no spaces, no ':'.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$")
SECRET_MIN_CHARS = 16
SECRET_MAX_CHARS = 512
# "Two secrets may be active during a rotation": a third is refused until one is retired or expires.
MAX_ACTIVE_SECRETS = 2
# The longest a rotated-out secret may stay active, seconds.
MAX_OVERLAP_S = 7 * 86400
DELIVERY_ID_MAX_CHARS = 255
ACTOR_PREFIX = "trigger:"
CHANNEL = "webhook"
# Derivation labels: the seal key's HMAC use (checkpoints) never meets these.
_ENCRYPTION = b"ticketiq trigger secret encryption v1"
_FINGERPRINT = b"ticketiq trigger secret fingerprint v1"
NONCE_BYTES = 12
# The namespace of what binds a trigger or a secret to the request that made it (uuid5 of the token and
# the Idempotency-Key), as jobs derive their ids.
KEYED_REQUESTS = uuid.UUID("7ca41296-b7e6-4e21-8ff2-757824f98bef")


@dataclass(frozen=True)
class SealedSecret:
    """A secret as stored: which seal key it is encrypted under, the nonce and the ciphertext (with the
    GCM tag)."""

    key_id: str
    nonce: bytes
    ciphertext: bytes

    def __repr__(self) -> str:
        return f"SealedSecret(key_id={self.key_id!r})"


def checked_name(name: str, field: str = "body.name") -> str:
    if not _NAME.fullmatch(name):
        raise RequestError(
            field,
            f"trigger name {name!r} is not valid: use 1 to 100 letters, digits, '.', '_', '-' or '@', "
            "starting with a letter or digit",
        )
    return name


def checked_secret(secret: str, field: str = "body.secret") -> str:
    """A secret long enough to resist guessing. The message never quotes it."""
    if not SECRET_MIN_CHARS <= len(secret) <= SECRET_MAX_CHARS:
        raise RequestError(
            field,
            f"the secret must be {SECRET_MIN_CHARS} to {SECRET_MAX_CHARS} characters long (it was {len(secret)}); "
            "use e.g. `openssl rand -hex 32`",
        )
    if not all(" " < c <= "~" for c in secret):
        raise RequestError(field, "the secret must be printable ASCII without spaces (e.g. `openssl rand -hex 32`)")
    return secret


def delivery_id_problem(delivery_id: str | None) -> str | None:
    """Why a header value cannot be a delivery id (the dedupe key), or None when it can. Printable
    ASCII only, so the run key built from it (`run_key`) is unambiguous."""
    if delivery_id is None or not delivery_id:
        return "no X-TicketIQ-Delivery header: send the delivery's id (the same on every redelivery)"
    if len(delivery_id) > DELIVERY_ID_MAX_CHARS:
        return f"X-TicketIQ-Delivery is {len(delivery_id)} characters long; at most {DELIVERY_ID_MAX_CHARS} are taken"
    if not all(" " <= c <= "~" for c in delivery_id):
        return "X-TicketIQ-Delivery holds characters that are not printable ASCII; send a UUID or the like"
    return None


def run_key(trigger: str, delivery_id: str) -> str:
    """The run's idempotency key: one delivery, one run, however often it is delivered or retried after a
    crash. A tab separates the parts: an API Idempotency-Key is printable ASCII, so no API client can
    make (and squat) this key, and neither part can hold a tab."""
    return f"{CHANNEL}\t{trigger}\t{delivery_id}"


def request_key(by: str, key: str | None) -> str | None:
    """What binds a trigger or a secret to the request that made it, derived from the token's name and
    `key` (the route and the request's Idempotency-Key): that request, retried after its process died
    before the key's answer was kept, finds what it made instead of making it again. None without a key."""
    return None if key is None else str(uuid.uuid5(KEYED_REQUESTS, f"{by}\n{key}"))


def actor(trigger: str) -> str:
    """Who a delivery's run is started by: the trigger, never a token (token names hold no ':')."""
    return f"{ACTOR_PREFIX}{trigger}"


def add_refusal(secrets: Sequence[SecretState]) -> RequestError | None:
    """Why another secret may not be added now: two are active already (a rotation is under way)."""
    active = [s.n for s in secrets if s.active]
    if len(active) >= MAX_ACTIVE_SECRETS:
        return Conflict(
            "path.name",
            f"secrets {', '.join(map(str, active))} are active; at most {MAX_ACTIVE_SECRETS} are: retire one "
            "(DELETE /v1/triggers/{name}/secrets/{n}) or let its expiry pass first",
        )
    return None


def retire_refusal(secrets: Sequence[SecretState], n: int) -> RequestError | None:
    """Why secret `n` may not be retired: there is none, it is no longer active, or it is the last
    active one (a trigger without one would refuse every delivery: add the next secret first)."""
    found = next((s for s in secrets if s.n == n), None)
    if found is None:
        return NotFound("path.n", f"the trigger has no secret {n}")
    if found.retired_at is not None:
        return Conflict("path.n", f"secret {n} was retired already, at {found.retired_at.isoformat()}")
    if not found.active:
        return Conflict("path.n", f"secret {n} expired already, at {found.expires_at}")
    if sum(s.active for s in secrets) == 1:
        return Conflict("path.n", f"secret {n} is the only active one: add the next secret first")
    return None


def _derived(keys: SealKeys, key_id: str, label: bytes) -> bytes:
    return hmac.digest(keys.secrets[key_id], label, "sha256")


def seal_secret(keys: SealKeys, trigger: str, secret: str) -> SealedSecret:
    """The secret encrypted under the signing seal key, bound to its trigger."""
    nonce = os.urandom(NONCE_BYTES)
    aead = AESGCM(_derived(keys, keys.signing_id, _ENCRYPTION))
    return SealedSecret(keys.signing_id, nonce, aead.encrypt(nonce, secret.encode(), trigger.encode()))


def open_secret(keys: SealKeys, trigger: str, sealed: SealedSecret) -> bytes | None:
    """The secret in clear, or None when its key id is no longer listed or it does not open (altered,
    or moved from another trigger)."""
    if sealed.key_id not in keys.secrets:
        return None
    aead = AESGCM(_derived(keys, sealed.key_id, _ENCRYPTION))
    try:
        return aead.decrypt(sealed.nonce, sealed.ciphertext, trigger.encode())
    except InvalidTag:
        return None


def fingerprint(keys: SealKeys, secret: str) -> str:
    """What binds an Idempotency-Key to the secret it was used with, kept instead of the secret: keyed,
    so the stored value cannot be used to guess a short secret offline."""
    return hmac.digest(_derived(keys, keys.signing_id, _FINGERPRINT), secret.encode(), "sha256").hex()
