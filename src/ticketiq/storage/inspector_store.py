"""What the inspector reads and writes: the facts its gate decides on, and its audit rows.

An ad hoc call is never written ahead for a resume (it is never sent again by anyone), so the audit
log is all it leaves behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ticketiq.errors import StorageError
from ticketiq.storage.database import Database


@dataclass(frozen=True)
class InspectorFacts:
    """What the gates know about one ad hoc call, read in one query."""

    principal: str  # the run-as principal: the operator's token name
    tenant: str
    channel: str
    tenant_quarantine: str | None = None  # reason, when quarantined
    channel_enabled: bool = True
    principal_may_run: bool = True
    granted: frozenset[str] = field(default_factory=frozenset)
    needs_approval: frozenset[str] = field(default_factory=frozenset)


@dataclass(frozen=True)
class Recorded:
    """A call's outcome as its `inspector.call` audit row holds it."""

    audit_id: int
    outcome: str  # ok / error / uncertain
    error: str | None


class InspectorStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def facts(self, principal: str, tenant: str, channel: str) -> InspectorFacts:
        params = {"principal": principal, "tenant": tenant, "channel": channel}
        row = await self.db.fetch_one("inspector.facts", params)
        if row is None:  # a SELECT without FROM always answers one row
            raise StorageError("reading the inspector's gate facts answered no row", retryable=False)
        return InspectorFacts(
            principal=principal,
            tenant=tenant,
            channel=channel,
            tenant_quarantine=row["tenant_quarantine"],
            channel_enabled=row["channel_enabled"],
            principal_may_run=row["principal_may_run"],
            granted=frozenset(row["granted"]),
            needs_approval=frozenset(row["needs_approval"]),
        )

    async def audit(self, action: str, actor: str, detail: dict[str, Any]) -> int:
        row = await self.db.fetch_one("inspector.audit", {"action": action, "actor": actor, "detail": detail})
        if row is None:
            raise StorageError(f"auditing {action} answered no row", retryable=False)
        return int(row["id"])

    async def start(self, actor: str, detail: dict[str, Any]) -> int | None:
        """The write's `inspector.call.started` row; None when one with its key is on record already."""
        row = await self.db.fetch_one("inspector.start", {"actor": actor, "detail": detail})
        return None if row is None else int(row["id"])

    async def outcome(self, key: str) -> Recorded | None:
        row = await self.db.fetch_one("inspector.outcome", {"key": key})
        return None if row is None else Recorded(int(row["id"]), str(row["outcome"]), row["error"])
