"""The cluster's seal key probe (`queries/seal.sql`, I17): one fixed text sealed by the key that signs,
one row for the whole cluster. What a process does with it (refuse to start unless its keys verify it)
is `process.check_key_probe`'s."""

from __future__ import annotations

from ticketiq.storage.database import Database


class SealProbeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    async def offer(self, key_id: str, seal: str) -> None:
        """The first process of a cluster writes the probe; later ones find it there."""
        await self.db.execute("seal.offer_probe", {"key_id": key_id, "seal": seal})

    async def probe(self) -> tuple[str, str]:
        """The probe as it stands: (key id, seal)."""
        row = await self.db.fetch_one("seal.probe")
        assert row is not None  # offered first
        return str(row["key_id"]), str(row["seal"])

    async def find(self) -> tuple[str, str] | None:
        """The probe, or None before the cluster's first process wrote it (what `ticketiq doctor` reads)."""
        row = await self.db.fetch_one("seal.probe")
        return None if row is None else (str(row["key_id"]), str(row["seal"]))

    async def move(self, key_id: str, seal: str, was: str) -> None:
        """Move the probe to the key this process signs with, from the key it was found under."""
        await self.db.execute("seal.move_probe", {"key_id": key_id, "seal": seal, "was": was})
