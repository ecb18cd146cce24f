"""The run list's reads (`queries/run_list.sql`): a page of runs, and the runs by status."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ticketiq.storage.database import Database, Row


class RunListStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def page(self, params: Mapping[str, Any]) -> list[Row]:
        """The runs `params` select (views/run_list.py makes them), newest first. One transaction, so
        the statement is planned for the filters given (`run_list.custom_plans`)."""
        async with self.db.transaction() as tx:
            await tx.execute("run_list.custom_plans")
            return await tx.fetch_all("run_list.page", params)

    async def counts(self, scope: str | None) -> dict[str, int]:
        """How many runs have each status: every run still going, and the ended runs made in the last day
        (a status no such run has is left out)."""
        async with self.db.transaction() as tx:
            await tx.execute("run_list.custom_plans")  # a caller's scope reads its index, not the table
            rows = await tx.fetch_all("run_list.counts", {"scope": scope})
        return {str(r["status"]): int(r["n"]) for r in rows}
