"""Idempotency-Key rows: claimed by a request, finished with its answer or released, purged by the leader.

Keyed by (scope, principal, key): the route, the token's name, the client's key. A claim is identified
by its holder and when it was taken, so a request that overran its claim can neither finish nor
release the claim a repeat took over from it. Nothing here decides: `intake/idempotency.py` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ticketiq.storage.database import Database


@dataclass(frozen=True)
class KeyRef:
    scope: str  # the route: "POST /v1/runs"
    principal: str  # the token's name
    key: str

    def params(self) -> dict[str, str]:
        return {"scope": self.scope, "principal": self.principal, "key": self.key}


@dataclass(frozen=True)
class Claim:
    """A key this request holds while it answers."""

    ref: KeyRef
    holder: str
    claimed_at: datetime

    def params(self) -> dict[str, object]:
        return {**self.ref.params(), "holder": self.holder, "claimed_at": self.claimed_at}


@dataclass(frozen=True)
class StoredKey:
    """A key's row as found, with the database clock at that moment."""

    request_hash: str
    state: str  # working / done
    status_code: int | None  # done: the answer kept
    response: str | None  # done: its JSON text exactly as sent
    holder: str
    expires_at: datetime | None  # working: when the claim lapses
    holder_alive: bool  # working: the holder still holds its liveness mark
    now: datetime


class IdempotencyStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def claim(self, ref: KeyRef, request_hash: str, holder: str, claim_s: float) -> Claim | None:
        """The key claimed for this request; None when a row holds it already."""
        row = await self.db.fetch_one(
            "idempotency.claim", {**ref.params(), "request_hash": request_hash, "holder": holder, "claim_s": claim_s}
        )
        return None if row is None else Claim(ref, holder, row["created_at"])

    async def get(self, ref: KeyRef) -> StoredKey | None:
        """The key's row, once it is on the synchronous standby (I20: a repeat is answered from it)."""
        row = await self.db.fetch_one("idempotency.get", ref.params())
        if row is None:
            return None
        return StoredKey(row["request_hash"], row["state"], row["status_code"], row["response"], row["holder"],
                         row["expires_at"], bool(row["holder_alive"]), row["now"])  # fmt: skip

    async def take_over(self, ref: KeyRef, request_hash: str, holder: str, claim_s: float) -> Claim | None:
        """The stale claim of the same request taken; None when it is no longer stale (another repeat
        took it first, or its request was answered meanwhile) or is gone."""
        row = await self.db.fetch_one(
            "idempotency.take_over",
            {**ref.params(), "request_hash": request_hash, "holder": holder, "claim_s": claim_s},
        )
        return None if row is None else Claim(ref, holder, row["created_at"])

    async def finish(self, claim: Claim, status_code: int, response: str, run_id: str | None = None) -> bool:
        """Keep the answer (with the run it is about, if any); False when the claim was taken over meanwhile
        (the taker's answer counts)."""
        params = {**claim.params(), "status_code": status_code, "response": response, "run_id": run_id}
        return await self.db.execute("idempotency.finish", params) == 1

    async def release(self, claim: Claim) -> bool:
        """Free the key (nothing was made); False when the claim was taken over meanwhile."""
        return await self.db.execute("idempotency.release", claim.params()) == 1
