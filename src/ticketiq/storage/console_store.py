"""The console's sign-in sessions (migration 024): started, read by the cookie's hash, ended (every process
is told, `ticketiq_sessions`: the event streams a session opened end with it).

The store never sees a session id, only its SHA-256; nor a token, only the name of the one a session
acts as. A session read back carries that token's role and agents as they stand now: a revoked token's
sessions are found no more.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from ticketiq.storage.database import Database


@dataclass(frozen=True)
class StoredSession:
    token_name: str
    role: str
    agents: tuple[str, ...] | None  # None: every agent
    csrf_secret: str
    expires_at: datetime


class ConsoleStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def start(self, id_hash: str, token_name: str, csrf_secret: str, ttl_s: float) -> datetime | None:
        """A session acting as the token, expiring `ttl_s` from now (database clock); None when the token
        was revoked meanwhile."""
        params = {"id_hash": id_hash, "name": token_name, "csrf_secret": csrf_secret, "ttl_s": ttl_s}
        row = await self.db.fetch_one("console.start", params)
        if row is None:
            return None
        expires: datetime = row["expires_at"]
        return expires

    async def get(self, id_hash: str) -> StoredSession | None:
        row = await self.db.fetch_one("console.get", {"id_hash": id_hash})
        if row is None:
            return None
        agents = None if row["agents"] is None else tuple(row["agents"])
        return StoredSession(row["token_name"], row["role"], agents, row["csrf_secret"], row["expires_at"])

    async def end(self, id_hash: str) -> str | None:
        """The token name the ended session acted as; None when there was no such session."""
        row = await self.db.fetch_one("console.end", {"id_hash": id_hash})
        return None if row is None else str(row["token_name"])

    async def alive(self, id_hashes: Collection[str]) -> set[str]:
        """Of these sessions (their ids' hashes), those `get` still finds: unexpired, their token unrevoked."""
        rows = await self.db.fetch_all("console.alive", {"id_hashes": sorted(id_hashes)})
        return {str(row["id_hash"]) for row in rows}
