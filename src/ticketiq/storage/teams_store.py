"""The Teams inbox's statements (`queries/teams.sql`): receiving an activity, its run made, the listing.

A row is linked to its turn by `run_key`, the idempotency key its run is made with: nothing here writes
about a run, and a row's status is never stored but read from its run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ticketiq.storage.database import Database, Row


@dataclass(frozen=True)
class InboxRow:
    """An activity as the inbox keeps it (what the receiving route parsed)."""

    activity_id: str
    conversation_id: str
    content_hash: str
    run_key: str
    service_url: str
    team_id: str | None
    from_id: str
    from_name: str | None
    actor: str
    text: str
    app_url: str
    activity: dict[str, Any]


@dataclass(frozen=True)
class Seen:
    """What the inbox held of an activity when a delivery of it came: its row and the row's run."""

    row_id: int
    run_id: str | None
    reason: str | None


@dataclass(frozen=True)
class Unstarted:
    row_id: int
    run_key: str
    actor: str
    text: str


@dataclass(frozen=True)
class ReplyTarget:
    """Where a turn's reply goes, and how it is read back."""

    row_id: int
    activity_id: str
    conversation_id: str
    service_url: str
    team_id: str | None
    app_url: str


@dataclass(frozen=True)
class Listed:
    """A row as the inbox listing shows it, with what its run says of the turn."""

    id: int
    activity_id: str
    conversation_id: str
    from_id: str
    from_name: str | None
    text: str
    received_at: datetime
    reason: str | None
    run_id: str | None
    run_status: str | None
    run_error: str | None
    reply: dict[str, Any] | None


# (the row received before with this activity id, if any; the id of an activity received within the
# window with the same content, if any) -> whether to store this one
Decide = Callable[[Seen | None, str | None], bool]


class TeamsStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def receive(
        self, row: InboxRow, window_s: float, decide: Decide
    ) -> tuple[Seen | None, str | None, int | None]:
        """Decide on one delivery and store it when `decide` says so, in one transaction: deliveries of
        the same content are decided one after another (an advisory lock on the hash), each seeing the
        rows the ones before stored. Returns what was seen and the new row's id (None: not stored). I20: a row
        found is made durable by the statement that found it, so this transaction's commit, which comes
        before the return, waits for the synchronous standby."""
        async with self.db.transaction() as tx:
            await tx.fetch_one("teams.lock_content", {"content_hash": row.content_hash})
            found = await tx.fetch_one(
                "teams.by_activity", {"conversation_id": row.conversation_id, "activity_id": row.activity_id}
            )
            seen = None if found is None else Seen(int(found["id"]), _text(found["run_id"]), found["reason"])
            same = await tx.fetch_one("teams.same_content", {"content_hash": row.content_hash, "window_s": window_s})
            duplicate_of = None if same is None else str(same["activity_id"])
            if not decide(seen, duplicate_of):
                return seen, duplicate_of, None
            made = await tx.fetch_one("teams.insert", {
                "activity_id": row.activity_id, "conversation_id": row.conversation_id,
                "content_hash": row.content_hash, "run_key": row.run_key, "service_url": row.service_url,
                "team_id": row.team_id, "from_id": row.from_id, "from_name": row.from_name, "actor": row.actor,
                "text": row.text, "app_url": row.app_url, "activity": row.activity,
            })  # fmt: skip
            assert made is not None
            return seen, duplicate_of, int(made["id"])

    async def set_run(self, row_id: int, run_id: str) -> None:
        await self.db.execute("teams.set_run", {"id": row_id, "run_id": run_id})

    async def refuse(self, row_id: int, reason: str) -> None:
        await self.db.execute("teams.refuse", {"id": row_id, "reason": reason})

    async def unstarted(self, grace_s: float, limit: int) -> list[Unstarted]:
        rows = await self.db.fetch_all("teams.unstarted", {"grace_s": grace_s, "limit": limit})
        return [Unstarted(int(r["id"]), r["run_key"], r["actor"], r["text"]) for r in rows]

    async def reply_target(self, run_id: str) -> ReplyTarget | None:
        r = await self.db.fetch_one("teams.reply_target", {"run_id": run_id})
        if r is None:
            return None
        return ReplyTarget(int(r["id"]), r["activity_id"], r["conversation_id"], r["service_url"], r["team_id"],
                           r["app_url"])  # fmt: skip

    async def listing(self, before: int | None, limit: int) -> list[Listed]:
        rows = await self.db.fetch_all("teams.list", {"before": before, "limit": limit})
        return [_listed(r) for r in rows]


def _listed(r: Row) -> Listed:
    return Listed(
        id=int(r["id"]), activity_id=r["activity_id"], conversation_id=r["conversation_id"], from_id=r["from_id"],
        from_name=r["from_name"], text=r["text"], received_at=r["received_at"], reason=r["reason"],
        run_id=_text(r["run_id"]), run_status=r["run_status"], run_error=r["run_error"],
        reply=r["reply"] if isinstance(r["reply"], dict) else None,
    )  # fmt: skip


def _text(value: Any) -> str | None:
    return None if value is None else str(value)
