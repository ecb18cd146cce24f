"""Is this delivery signed by a secret we hold? Pure decisions over the raw body and its headers.

Two schemes, both HMAC-SHA256 over the RAW body as received (never over re-serialized JSON), every
comparison constant-time (`hmac.compare_digest`):

- Webhook triggers: `X-TicketIQ-Signature: t=<unix seconds>,v1=<hex HMAC of "<t>.<raw body>">`. The
  timestamp is signed with the body, so a captured delivery replayed later than `TOLERANCE_S` from now
  (either way) is refused. A sender may send several `v1=` values (one per secret during a rotation);
  any one made by any active secret passes.
- Jira Cloud ticket events: `X-Hub-Signature: sha256=<hex HMAC of the raw body>`, one configured secret.
  Jira signs no timestamp: redeliveries are deduped by the event's identifier, replays by the body.

A signature verified is not yet a request taken once: `signed_once` decides that (I19).

The clock is an argument (`now_s`, the database clock's epoch seconds): no decision reads it itself.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

TOLERANCE_S = 300.0
DELIVERY_HEADER = "X-TicketIQ-Delivery"
SIGNATURE_HEADER = "X-TicketIQ-Signature"
HUB_HEADER = "X-Hub-Signature"
# A sender signing with every secret it holds sends one v1 per secret; more than this is no rotation.
MAX_SIGNATURES = 8
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
# Compared against when a trigger holds no secret (or does not exist), so an unknown trigger costs the
# same work as a known one and its answer is the same.
_NO_SECRET = b"\x00" * 32


class Verdict(StrEnum):
    ACCEPTED = "accepted"
    MISSING = "missing"  # no signature header
    MALFORMED = "malformed"  # not the scheme's shape
    STALE = "stale"  # signed more than TOLERANCE_S from now: a replay, or a sender's clock far off
    MISMATCH = "mismatch"  # made by no secret we hold


@dataclass(frozen=True)
class Check:
    verdict: Verdict
    reason: str
    secret: int | None = None  # which of the secrets given made it (its position), once accepted
    timestamp: str | None = None  # a webhook delivery's t, as signed, once accepted

    @property
    def accepted(self) -> bool:
        return self.verdict is Verdict.ACCEPTED


@dataclass(frozen=True)
class Signature:
    """A parsed `X-TicketIQ-Signature`: the timestamp as sent (it is signed as text) and the v1 values."""

    timestamp: str
    v1: tuple[str, ...]


def parse(header: str | None) -> Signature | Check:
    """The signature a header carries, or the refusal that says what is wrong with it."""
    if header is None or not header.strip():
        return Check(Verdict.MISSING, f"no {SIGNATURE_HEADER} header: sign the body as t=<unix seconds>,v1=<hex>")
    timestamps: list[str] = []
    v1: list[str] = []
    for part in header.split(","):
        name, sep, value = part.strip().partition("=")
        if not sep:
            return _malformed(f"{part.strip()!r} is not name=value")
        if name == "t":
            timestamps.append(value)
        elif name == "v1":
            v1.append(value)
        # Other schemes (v0, a future v2) are ignored, as Stripe's receivers do.
    if len(timestamps) != 1 or not _TIMESTAMP.fullmatch(timestamps[0]):
        return _malformed("it needs exactly one t=<unix seconds>")
    if not v1:
        return _malformed("it holds no v1=<hex HMAC-SHA256>")
    if len(v1) > MAX_SIGNATURES:
        return _malformed(f"it holds {len(v1)} v1 values; at most {MAX_SIGNATURES} are taken")
    if not all(_HEX.fullmatch(v) for v in v1):
        return _malformed("each v1 must be 64 hex digits (HMAC-SHA256)")
    return Signature(timestamps[0], tuple(v.lower() for v in v1))


def _malformed(why: str) -> Check:
    return Check(Verdict.MALFORMED, f"{SIGNATURE_HEADER} is malformed: {why}; expected t=<unix seconds>,v1=<hex>")


def signed_payload(timestamp: str, body: bytes) -> bytes:
    """What a webhook sender signs: the timestamp exactly as sent, a dot, and the raw body."""
    return timestamp.encode() + b"." + body


def sign(secret: bytes, timestamp: str, body: bytes) -> str:
    """The v1 value a sender holding `secret` computes (the recipe of docs/entry-points.md, Webhooks, in Python)."""
    return hmac.digest(secret, signed_payload(timestamp, body), "sha256").hex()


def header_for(secrets: Sequence[bytes], timestamp: int, body: bytes) -> str:
    """A whole `X-TicketIQ-Signature` value, one v1 per secret."""
    t = str(timestamp)
    return ",".join([f"t={t}", *(f"v1={sign(s, t, body)}" for s in secrets)])


def check_delivery(header: str | None, body: bytes, secrets: Sequence[bytes], now_s: float) -> Check:
    """Whether a webhook delivery was signed, within the window around `now_s`, by one of `secrets`
    (the trigger's active ones; none for an unknown trigger, which then fails like a bad signature)."""
    parsed = parse(header)
    if isinstance(parsed, Check):
        return parsed
    skew = now_s - int(parsed.timestamp)
    if abs(skew) > TOLERANCE_S:
        when = "old" if skew > 0 else "in the future"
        return Check(
            Verdict.STALE,
            f"the signature's timestamp is {abs(skew):.0f} s {when}; more than {TOLERANCE_S:.0f} s from now "
            "is refused (a replay, or the sender's clock is off)",
        )
    payload = signed_payload(parsed.timestamp, body)
    found: int | None = None
    for i, secret in enumerate(secrets or [_NO_SECRET]):
        expected = hmac.digest(secret, payload, "sha256").hex()
        for given in parsed.v1:
            # Every pair is compared: the time taken says nothing about which one matched.
            if hmac.compare_digest(expected, given) and secrets and found is None:
                found = i
    if found is None:
        return Check(
            Verdict.MISMATCH,
            f"{SIGNATURE_HEADER} does not verify: no active secret of a trigger by this name made it "
            "(sign t.body with the trigger's secret)",
        )
    return Check(Verdict.ACCEPTED, "signed", found, parsed.timestamp)


def check_hub(header: str | None, body: bytes, secret: bytes | None) -> Check:
    """Whether a Jira ticket event was signed with the configured secret (`X-Hub-Signature`)."""
    if secret is None:
        return Check(Verdict.MISMATCH, "this service takes no ticket events: TICKETIQ_JIRA_WEBHOOK_SECRET is unset")
    if header is None or not header.strip():
        return Check(Verdict.MISSING, f"no {HUB_HEADER} header: configure the Jira webhook with a secret")
    method, sep, value = header.strip().partition("=")
    if not sep or method.lower() != "sha256" or not _HEX.fullmatch(value):
        return Check(Verdict.MALFORMED, f"{HUB_HEADER} is malformed: expected sha256=<64 hex digits>")
    expected = hmac.digest(secret, body, "sha256").hex()
    if not hmac.compare_digest(expected, value.lower()):
        return Check(Verdict.MISMATCH, f"{HUB_HEADER} does not verify with TICKETIQ_JIRA_WEBHOOK_SECRET")
    return Check(Verdict.ACCEPTED, "signed", 0)
