"""The app processes as an operator sees them (`queries/processes.sql`, GET /v1/processes): the live
ones with what each holds and how its MCP servers answer it, and the last that ended, with how."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from ticketiq.storage.database import Database, Row


class ProcessStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def live(self) -> list[Row]:
        return await self.db.fetch_all("processes.live")

    async def ended(self, limit: int) -> list[Row]:
        return await self.db.fetch_all("processes.ended", {"limit": limit})

    async def report_mcp(self, process: str, servers: list[dict[str, Any]]) -> None:
        """How this process's MCP servers answer it now (GET /v1/processes, the console)."""
        await self.db.execute("processes.report_mcp", {"id": process, "servers": Jsonb(servers)})
