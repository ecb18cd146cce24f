"""API bearer tokens: stored by their SHA-256 only, looked up by it, revoked by name.

The store never sees a token, only its hash; and only `credential`, the lookup a request is
authenticated by, returns a hash at all. Each change lands with its audit row in one statement; a
trigger tells every process of it in the same transaction (migration 027), so a process's cache of the
tokens it found (`auth/token_cache.py`) drops a revoked one as soon as the revocation commits.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from ticketiq.auth.token_cache import TokenCache
from ticketiq.errors import StorageError
from ticketiq.storage.database import ConnectionLimits, Database, Row
from ticketiq.storage.migrate import migrate_pooled


@dataclass(frozen=True)
class StoredToken:
    """A token as people see it: never its hash."""

    name: str
    role: str
    agents: tuple[str, ...] | None  # None: every agent
    created_at: datetime
    revoked_at: datetime | None


@dataclass(frozen=True)
class Credential:
    """An unrevoked token found by its hash, to compare and act as."""

    name: str
    role: str
    agents: tuple[str, ...] | None
    token_hash: str


def _agents(row: Row) -> tuple[str, ...] | None:
    return None if row["agents"] is None else tuple(row["agents"])


def _token(row: Row) -> StoredToken:
    return StoredToken(row["name"], row["role"], _agents(row), row["created_at"], row["revoked_at"])


class TokenStore:
    def __init__(self, db: Database, cache: TokenCache[Credential] | None = None) -> None:
        self.db = db
        self.cache = cache  # an app process's: found tokens, trusted while its listener is connected

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, url: str, limits: ConnectionLimits) -> AsyncIterator[TokenStore]:
        """A store on a small pool of its own, the schema migrated first: for the CLI and the demo,
        which may reach the database before any app process did."""
        db = Database(url, min_size=1, max_size=2, limits=limits)
        await db.open()
        try:
            await migrate_pooled(db)
            yield cls(db)
        finally:
            await db.close()

    async def create(
        self, name: str, role: str, agents: Sequence[str] | None, token_hash: str, actor: str
    ) -> StoredToken | None:
        """None when a token of that name exists (revoked or not): names are never reused."""
        params = {"name": name, "role": role, "agents": None if agents is None else list(agents),
                  "token_hash": token_hash, "actor": actor}  # fmt: skip
        try:
            row = await self.db.fetch_one("tokens.create", params)
        except StorageError as exc:
            # The driver's message can quote the failing row, hash and all: none of it may reach a log.
            raise StorageError(f"the token was not made: database error {exc.sqlstate} in tokens.create",
                               exc.sqlstate, exc.retryable) from None  # fmt: skip
        return None if row is None else _token(row)

    async def revoke(self, name: str, actor: str) -> StoredToken | None:
        """None when there is no such token, or it was revoked already (`get` tells which)."""
        row = await self.db.fetch_one("tokens.revoke", {"name": name, "actor": actor})
        if row is not None and self.cache is not None:
            # This process drops it before answering: its own notification comes back asynchronously, and
            # the revoker's next request must already be refused (the other processes hear it within 1 s).
            self.cache.changed(name)
        return None if row is None else _token(row)

    async def get(self, name: str) -> StoredToken | None:
        """The token, once it is on the synchronous standby (I20: "revoked already" is answered from it)."""
        row = await self.db.fetch_one("tokens.get", {"name": name})
        return None if row is None else _token(row)

    async def every(self) -> list[StoredToken]:
        """Every token, revoked ones too, oldest first."""
        return [_token(r) for r in await self.db.fetch_all("tokens.list")]

    async def unrevoked(self, names: Collection[str]) -> set[str]:
        """Of these token names, those not revoked (one statement)."""
        rows = await self.db.fetch_all("tokens.unrevoked", {"names": sorted(names)})
        return {str(row["name"]) for row in rows}

    async def credential(self, token_hash: str) -> Credential | None:
        """The unrevoked token with this hash: from the cache while it may be trusted, else looked up (and
        kept when found)."""
        if self.cache is not None and (kept := self.cache.found(token_hash)) is not None:
            return kept
        begun = None if self.cache is None else self.cache.begin()
        row = await self.db.fetch_one("tokens.credential", {"token_hash": token_hash})
        if row is None:
            return None  # unknown tokens are never kept: they cannot grow the cache
        found = Credential(row["name"], row["role"], _agents(row), row["token_hash"])
        if self.cache is not None:
            self.cache.keep(token_hash, found.name, found, begun)
        return found
