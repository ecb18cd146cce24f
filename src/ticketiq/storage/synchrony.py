"""How many copies a commit has when it is acknowledged, as the primary itself sees it.

With a synchronous standby streaming, a commit is acknowledged once two servers have it. Between a
failover and the old node's return (pg_auto_failover's `wait_primary`: it empties
`synchronous_standby_names`), or on a server with no standby at all (the embedded default), a commit
is acknowledged by the primary alone: a disk lost then is every commit since lost. The processes view
(`GET /v1/processes`, the console) and `ticketiq db ha status` say which it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ticketiq.storage.database import Database


@dataclass(frozen=True)
class Synchrony:
    copies: int  # servers a commit is on when it is acknowledged
    streaming: int  # standbys streaming from this primary
    says: str

    def view(self) -> dict[str, Any]:
        return {"copies": self.copies, "streaming": self.streaming, "synchronous": self.copies > 1,
                "says": self.says}  # fmt: skip


def synchrony(standby_names: str, synchronous_commit: str, streaming: int, synchronous: int) -> Synchrony:
    """The verdict from the primary's settings and pg_stat_replication."""
    waits = bool(standby_names.strip()) and synchronous_commit in {"on", "remote_write", "remote_apply"}
    if waits and synchronous > 0:
        return Synchrony(1 + synchronous, streaming, "synchronous: a commit is acknowledged once a standby has it")
    if waits:
        # Named but not streaming: commits wait for it (and hang) until it returns or is dropped from the
        # list (pg_auto_failover does so within its unhealthy timeout).
        return Synchrony(1, streaming, "ONE COPY: the synchronous standby is not streaming; commits wait for it")
    if streaming:
        return Synchrony(1, streaming, "ONE COPY: commits are acknowledged by the primary alone "
                                       "(its standby streams asynchronously)")  # fmt: skip
    return Synchrony(1, 0, "ONE COPY: no standby; commits are acknowledged by this server alone")


async def read(db: Database) -> Synchrony:
    row = await db.fetch_one("processes.synchrony")
    assert row is not None  # a SELECT of settings always answers a row
    return synchrony(row["standby_names"], row["synchronous_commit"], row["streaming"], row["synchronous"])
