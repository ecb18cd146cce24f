"""What a repeated `Idempotency-Key` gets: a pure decision over the key's row, and the rules of a key.

A POST that creates something claims its key (route, token, key) before it acts; a repeat finds the
claim and is answered by `decide`. The HTTP side (`entries/idempotency.py`) carries the verdict out.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from ticketiq.engine.seal import canonical

KEY_MAX_CHARS = 255
# A request being answered holds its key this long. A repeat after that may take the key over: the
# process answering it may have died (or the repeat sooner, once its liveness mark is free).
CLAIM_S = 60.0


class Verdict(StrEnum):
    """What a request does with a key it found taken, or free."""

    CLAIM = "claimed"  # no row holds the key: claim it and answer
    REPLAY = "replay"  # answered before, to the same request: send that answer again
    WORKING = "conflict_working"  # the same request is being answered right now: 409, retry later
    DIFFERENT = "conflict_different_request"  # the key was used for another request: 422, use a fresh key
    TAKE_OVER = "take_over_stale"  # claimed by a request no one is answering any more: claim it and answer


@dataclass(frozen=True)
class KeyRow:
    """A key's row as found: the request it was claimed for, and whether anyone still answers it."""

    request_hash: str
    state: str  # working / done
    claim_expires_at: datetime | None  # working: when the claim lapses (database clock)
    holder_alive: bool  # working: the answering process still holds its liveness mark


def decide(row: KeyRow | None, request_hash: str, now: datetime) -> Verdict:
    """What this request (hashed `request_hash`) does with the key, at `now` by the database clock.
    A key stays bound to the request it was first used for, answered or not."""
    if row is None:
        return Verdict.CLAIM
    if row.request_hash != request_hash:
        return Verdict.DIFFERENT
    if row.state == "done":
        return Verdict.REPLAY
    lapsed = row.claim_expires_at is None or now >= row.claim_expires_at
    if lapsed or not row.holder_alive:
        return Verdict.TAKE_OVER
    return Verdict.WORKING


def worth_keeping(status_code: int) -> bool:
    """Only a success is kept for repeats: after a refusal or a failure nothing was made, and the
    client may retry under the same key (a stored 4xx would keep refusing a request that now passes)."""
    return 200 <= status_code < 300


def key_problem(key: str) -> str | None:
    """Why a header value cannot be an Idempotency-Key, or None when it can."""
    if not key:
        return "the Idempotency-Key is empty; send 1 to 255 printable ASCII characters, or no header"
    if len(key) > KEY_MAX_CHARS:
        return f"the Idempotency-Key is {len(key)} characters long; at most {KEY_MAX_CHARS} are taken"
    if not all(" " <= c <= "~" for c in key):
        return "the Idempotency-Key holds characters that are not printable ASCII; send a UUID or the like"
    return None


def request_hash(asked: Any) -> str:
    """The request a key is bound to: SHA-256 of the canonical JSON of what was asked (the path's ids
    and the body), so the same request sent with other spacing or key order is the same request."""
    return hashlib.sha256(canonical(asked)).hexdigest()
