"""A process's own statements and the leader's (`queries/leader.sql`, `leases.renew`): the process's row
with its liveness lock, its heartbeat and its clean end; the renewal of every lease it holds (I4); the
leader lease taken, kept and given up; and the prune of long-ended processes' rows. Each is conditioned
on the holder's identity, or is one the static check lists with why it needs not be (the leader's
fence, tests/unit/test_statement_fences.py). The leader's claims of runs are the run store's.

The liveness statements and the renewal run on the process's dedicated connections, each answered within
its bound (`database.run_on`); the others through the pool.
"""

from __future__ import annotations

from collections.abc import Iterable

from ticketiq.storage import database
from ticketiq.storage.database import Connection, Database


async def register(
    conn: Connection,
    holder: str,
    pid: int,
    host: str,
    release: tuple[str, str],
    knows: tuple[int, int],
    *,
    within_s: float | None,
) -> int:
    """The process's row for `holder` (with the release it runs: version, commit; and the newest
    checkpoint state and seal formats it knows), its liveness lock taken in the same statement; returns
    the key of that lock (no one ever sees the row of a live process without it)."""
    params = {"id": holder, "pid": pid, "host": host, "version": release[0], "commit": release[1],
              "state_format": knows[0], "seal_format": knows[1]}  # fmt: skip
    rows = await database.run_on(conn, "leader.register", params, within_s=within_s)
    return int(rows[0]["lock_key"])


async def retake(conn: Connection, holder: str, *, within_s: float | None) -> int | None:
    """The liveness lock of `holder` taken again on `conn` after its connection was lost, its leases
    given up (made lapsed) in the same statement; None when the identity cannot be kept (found dead or
    stalled, or its lock is still held elsewhere): the caller closes `conn` and takes a new identity."""
    rows = await database.run_on(conn, "leader.retake", {"id": holder}, within_s=within_s)
    return int(rows[0]["lock_key"]) if rows else None


async def heartbeat(conn: Connection, *, within_s: float | None) -> None:
    """The liveness connection answers: its lock is still held."""
    await database.run_on(conn, "leader.heartbeat", within_s=within_s)


async def renew(
    conn: Connection, holder: str, ttl_s: float, names: Iterable[str], *, within_s: float | None
) -> set[str]:
    """I4: every lease `holder` holds of `names`, in one statement; returns the names still its own."""
    params = {"holder": holder, "ttl": ttl_s, "names": list(names)}
    return {str(row["name"]) for row in await database.run_on(conn, "leases.renew", params, within_s=within_s)}


class LeaderStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def end_process(self, holder: str) -> None:
        """A clean stop: the process's row says it stopped (no one takes it for a death)."""
        await self.db.fetch_all("leader.end_process", {"id": holder})

    async def lead(self, holder: str, ttl_s: float) -> bool:
        """Take or keep the leader lease: ours already, lapsed, or its holder's liveness mark is free."""
        return await self.db.fetch_one("leader.lead", {"holder": holder, "ttl": ttl_s}) is not None

    async def step_down(self, holder: str) -> None:
        """Give the leader lease up, if `holder` holds it, so another process leads at once."""
        await self.db.execute("leader.step_down", {"holder": holder})
