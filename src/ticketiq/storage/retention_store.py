"""The retention pass's statements (`queries/retention.sql`): one bounded batch each, its own transaction
(or, for a dry run, all of them inside one transaction the pass rolls back)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from psycopg.types.json import Jsonb

from ticketiq.storage.database import Row
from ticketiq.values.retention import Policy


class Runner(Protocol):
    """A Database (each statement its own transaction) or a Session (inside one)."""

    async def fetch_one(self, name: str, params: Any = None) -> Row | None: ...
    async def fetch_all(self, name: str, params: Any = None) -> list[Row]: ...
    async def execute(self, name: str, params: Any = None) -> int: ...


def _counts(row: Row | None) -> tuple[bool, dict[str, int]]:
    """(whether the fence held, the rows counted per table)."""
    if row is None:
        return False, {}
    return bool(row["ok"]), {k: int(v) for k, v in row.items() if k != "ok"}


class RetentionStore:
    def __init__(self, db: Runner, leader: str | None) -> None:
        self.db = db
        self.leader = leader  # the leader's identity fences each statement; None: `retention run`

    async def purgeable_runs(self, policy: Policy) -> list[str]:
        rows = await self.db.fetch_all("retention.purgeable_runs", {"keep_s": policy.runs_s, "limit": policy.batch})
        return [str(r["id"]) for r in rows]

    async def purge_runs(self, policy: Policy, ids: Sequence[str] | None = None) -> tuple[bool, dict[str, int]]:
        params = {"leader": self.leader, "keep_s": policy.runs_s, "limit": policy.batch,
                  "ids": None if ids is None else list(ids)}  # fmt: skip
        return _counts(await self.db.fetch_one("retention.purge_runs", params))

    async def purge_audit(self, policy: Policy) -> tuple[bool, dict[str, int]]:
        params = {"leader": self.leader, "keep_s": policy.audit_s, "limit": policy.batch}
        return _counts(await self.db.fetch_one("retention.purge_audit", params))

    async def purge_jobs(self, policy: Policy) -> tuple[bool, dict[str, int]]:
        params = {"leader": self.leader, "keep_s": policy.jobs_s, "limit": policy.batch}
        return _counts(await self.db.fetch_one("retention.purge_jobs", params))

    async def purge_short_lived(self, policy: Policy) -> tuple[bool, dict[str, int]]:
        params = {"leader": self.leader, "limit": policy.batch, "keys_s": policy.keys_s,
                  "processes_s": policy.processes_s, "runless_s": policy.runless_s}  # fmt: skip
        return _counts(await self.db.fetch_one("retention.purge_short_lived", params))

    async def begin_pass(self, process: str, dry_run: bool) -> tuple[int, datetime]:
        row = await self.db.fetch_one("retention.begin_pass", {"process": process, "dry_run": dry_run})
        assert row is not None  # an INSERT ... RETURNING
        return int(row["id"]), row["started_at"]

    async def end_pass(self, pass_id: int, deleted: dict[str, int], exported: list[str], error: str | None) -> None:
        params = {"id": pass_id, "deleted": Jsonb(deleted), "exported": Jsonb(exported), "error": error}
        await self.db.execute("retention.end_pass", params)

    async def last_pass(self) -> Row | None:
        return await self.db.fetch_one("retention.last_pass")

    async def oldest(self) -> dict[str, float | None]:
        rows = await self.db.fetch_all("retention.oldest")
        return {str(r["table"]): None if r["age_s"] is None else float(r["age_s"]) for r in rows}

    async def due(self, policy: Policy) -> dict[str, int]:
        row = await self.db.fetch_one(
            "retention.due", {"runs_s": policy.runs_s, "audit_s": policy.audit_s, "jobs_s": policy.jobs_s}
        )
        return {} if row is None else {k: int(v) for k, v in row.items()}

    async def rows(self) -> dict[str, int]:
        return {str(r["table"]): int(r["n"]) for r in await self.db.fetch_all("retention.rows")}
