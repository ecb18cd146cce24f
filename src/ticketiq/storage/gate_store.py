"""The gates' state: quarantines, channels, principals and their grants, approval policies.

Each change and its `gate.changed` audit row land in one transaction. Seeding from the agents file
only inserts what is missing, so a grant a person revoked stays revoked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ticketiq.storage.database import Database


class GateStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def state(self) -> dict[str, Any]:
        row = await self.db.fetch_one("gates.state")
        return dict(row or {})

    async def _change(
        self, query: str, params: dict[str, Any], by: str, before: tuple[str, dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        async with self.db.transaction() as tx:
            if before is not None:
                await tx.execute(*before)
            await tx.execute(query, params)
            await tx.execute("gates.audit", {"by": by, "detail": {"change": query, **params}})
        return params

    async def quarantine(self, kind: str, name: str, reason: str, by: str) -> dict[str, Any]:
        return await self._change("gates.quarantine", {"kind": kind, "name": name, "reason": reason}, by)

    async def release(self, kind: str, name: str, by: str) -> dict[str, Any]:
        return await self._change("gates.release_quarantine", {"kind": kind, "name": name}, by)

    async def set_channel(self, name: str, enabled: bool, by: str) -> dict[str, Any]:
        return await self._change("gates.set_channel", {"name": name, "enabled": enabled}, by)

    async def set_grant(self, principal: str, tool: str, granted: bool, by: str) -> dict[str, Any]:
        params = {"principal": principal, "tool": tool, "granted": granted}
        return await self._change("gates.set_grant", params, by, before=("gates.seed_principal", {"name": principal}))

    async def set_may_run(self, name: str, may_run: bool, by: str) -> dict[str, Any]:
        return await self._change("gates.set_may_run", {"name": name, "may_run": may_run}, by)

    async def set_policy(self, tool: str, needs_approval: bool, by: str) -> dict[str, Any]:
        return await self._change("gates.set_policy", {"tool": tool, "needs_approval": needs_approval}, by)

    async def seed(self, owner_tools: Mapping[str, Iterable[str]], approval_required: Iterable[str]) -> None:
        """Owners get grants for their agents' tools, and tools named in the file need approval, unless
        a person already decided otherwise (only what is missing is inserted)."""
        async with self.db.transaction() as tx:
            for owner, tools in owner_tools.items():
                await tx.execute("gates.seed_principal", {"name": owner})
                for tool in tools:
                    await tx.execute("gates.seed_grant", {"principal": owner, "tool": tool})
            for tool in sorted(approval_required):
                await tx.execute("gates.seed_policy", {"tool": tool, "needs_approval": True})
