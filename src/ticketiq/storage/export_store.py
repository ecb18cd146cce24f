"""Which runs an export writes (`queries/export.sql`): ended runs in (finished_at, id) order, a bounded
page at a time or the runs of one retention batch. Only reads; `views/run_export.py` writes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from ticketiq.storage.database import Database
from ticketiq.storage.rows import row_as

# The first page's cursor: the nil uuid sorts before every run's id.
NIL = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class EndedRun:
    id: str
    finished_at: datetime


class ExportStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def ended_page(self, since: datetime, until: datetime, after: EndedRun | None, limit: int) -> list[EndedRun]:
        """At most `limit` runs that ended in [since, until), strictly after `after` (None: from the start)."""
        params = {"since": since, "until": until, "limit": limit,
                  "after_at": since if after is None else after.finished_at,
                  "after_id": NIL if after is None else after.id}  # fmt: skip
        return [row_as(EndedRun, r) for r in await self.db.fetch_all("export.ended_page", params)]

    async def ended_of(self, run_ids: Sequence[str]) -> list[EndedRun]:
        """Those of `run_ids` that ended (a run not there, or not ended, is left out)."""
        rows = await self.db.fetch_all("export.ended_of", {"run_ids": list(run_ids)})
        return [row_as(EndedRun, r) for r in rows]

    async def now(self) -> datetime:
        """The database's clock."""
        row = await self.db.fetch_one("export.now")
        assert row is not None
        at: datetime = row["now"]
        return at
