"""Webhook triggers, their secrets and deliveries, Jira ticket events, and the claims of what their
signed requests signed (I19): the statements, typed rows.

A secret reaches this module only encrypted (`nonce`, `ciphertext`, under seal key `key_id`); its clear
text is the engine's alone. Each change of a trigger lands with its audit row in one statement; a
change of its secrets first locks the trigger, so "at most two active" holds under concurrent changes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from ticketiq.errors import StorageError
from ticketiq.storage.database import Database, Row

# Claims purged per statement: a long backlog goes in short statements, never one long lock.


@dataclass(frozen=True)
class SecretShown:
    """A secret as people see it: its number and lifetime, never the secret."""

    n: int
    created_by: str
    created_at: datetime
    expires_at: datetime | None
    retired_at: datetime | None
    retired_by: str | None
    active: bool


@dataclass(frozen=True)
class TriggerShown:
    name: str
    agent: str
    created_by: str
    created_at: datetime
    secrets: tuple[SecretShown, ...]


@dataclass(frozen=True)
class StoredSecret:
    """An active secret as kept: encrypted."""

    n: int
    key_id: str
    nonce: bytes
    ciphertext: bytes


@dataclass(frozen=True)
class Signing:
    """What a delivery to a trigger is checked with. `agent` None: no such trigger."""

    now_s: float
    agent: str | None
    secrets: tuple[StoredSecret, ...]


@dataclass(frozen=True)
class SecretState:
    n: int
    active: bool
    retired_at: datetime | None
    expires_at: datetime | None


@dataclass(frozen=True)
class EventRun:
    event_id: str
    agent: str
    run_id: str


def _shown(rows: list[Row]) -> list[TriggerShown]:
    out: dict[str, TriggerShown] = {}
    for r in rows:
        found = out.get(r["name"]) or TriggerShown(r["name"], r["agent"], r["created_by"], r["created_at"], ())
        if r["n"] is not None:
            secret = SecretShown(int(r["n"]), r["secret_created_by"], r["secret_created_at"], r["expires_at"],
                                 r["retired_at"], r["retired_by"], bool(r["active"]))  # fmt: skip
            found = TriggerShown(found.name, found.agent, found.created_by, found.created_at, (*found.secrets, secret))
        out[r["name"]] = found
    return list(out.values())


class TriggerStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ----- declaring ---------------------------------------------------------------------------------

    async def create(
        self, name: str, agent: str, sealed: tuple[str, bytes, bytes], actor: str, request_key: str | None
    ) -> bool:
        """The trigger with its first secret (key id, nonce, ciphertext); True too when the request
        with this `request_key` made it already (a retry after a crash); False when the name is in use."""
        key_id, nonce, ciphertext = sealed
        params = {"name": name, "agent": agent, "key_id": key_id, "nonce": nonce, "ciphertext": ciphertext,
                  "actor": actor, "request_key": request_key}  # fmt: skip
        return await self.db.fetch_one("triggers.create", params) is not None

    async def every(self) -> list[TriggerShown]:
        return _shown(await self.db.fetch_all("triggers.shown", {"name": None}))

    async def get(self, name: str) -> TriggerShown | None:
        found = _shown(await self.db.fetch_all("triggers.shown", {"name": name}))
        return found[0] if found else None

    async def add_secret(
        self,
        name: str,
        sealed: tuple[str, bytes, bytes],
        expire_others_in_s: float | None,
        actor: str,
        refusal: Callable[[Sequence[SecretState]], Exception | None],
        request_key: str | None = None,
    ) -> int | None:
        """Add a secret (key id, nonce, ciphertext) and return its number; None when there is no such
        trigger. `refusal` is asked with the trigger's secrets while the trigger is locked; what it
        returns is raised, and nothing is written. The request with this `request_key` gets the number of
        the secret it added already (a retry after a crash), and nothing is written."""
        async with self.db.transaction() as tx:
            # I20: the lock is a write: a secret found under it rests on a transaction that wrote.
            if await tx.fetch_one("triggers.lock", {"name": name}) is None:
                return None
            if request_key is not None:
                made = await tx.fetch_one("triggers.secret_made_by", {"name": name, "request_key": request_key})
                if made is not None:
                    return int(made["n"])
            states = [_state(r) for r in await tx.fetch_all("triggers.secrets_of", {"name": name})]
            if (why := refusal(states)) is not None:
                raise why
            key_id, nonce, ciphertext = sealed
            n = max((s.n for s in states), default=0) + 1
            params = {"name": name, "n": n, "key_id": key_id, "nonce": nonce, "ciphertext": ciphertext,
                      "actor": actor, "expire_others_in_s": expire_others_in_s, "request_key": request_key}  # fmt: skip
            await tx.fetch_one("triggers.add_secret", params)
        return n

    async def retire_secret(
        self, name: str, n: int, actor: str, refusal: Callable[[Sequence[SecretState]], Exception | None]
    ) -> bool:
        """Retire secret `n`; False when there is no such trigger. `refusal` as for `add_secret`."""
        async with self.db.transaction() as tx:
            if await tx.fetch_one("triggers.lock", {"name": name}) is None:
                return False
            why = refusal([_state(r) for r in await tx.fetch_all("triggers.secrets_of", {"name": name})])
            if why is None:
                await tx.fetch_one("triggers.retire_secret", {"name": name, "n": n, "actor": actor})
        # I20: a refusal ("retired already") is raised once the transaction that read it committed: its lock
        # was a write, so that commit waited for the synchronous standby (a rollback waits for nothing).
        if why is not None:
            raise why
        return True

    # ----- deliveries --------------------------------------------------------------------------------

    async def signing(self, name: str) -> Signing:
        rows = await self.db.fetch_all("triggers.signing", {"name": name})
        secrets = tuple(
            StoredSecret(int(r["n"]), r["key_id"], bytes(r["nonce"]), bytes(r["ciphertext"]))
            for r in rows
            if r["n"] is not None
        )
        return Signing(float(rows[0]["now_s"]), rows[0]["agent"], secrets)

    async def delivery(self, name: str, delivery_id: str) -> str | None:
        """The run a delivery started, once recorded; returned once it is on the synchronous standby (I20)."""
        row = await self.db.fetch_one("triggers.delivery", {"name": name, "delivery_id": delivery_id})
        return None if row is None else str(row["run_id"])

    async def record_delivery(self, name: str, delivery_id: str, run_id: str) -> str:
        """Record the delivery's run; the run recorded first when it was recorded already (once it is on
        the synchronous standby, I20)."""
        params = {"name": name, "delivery_id": delivery_id, "run_id": run_id}
        row = await self.db.fetch_one("triggers.record_delivery", params)
        if row is not None:
            return str(row["run_id"])
        recorded = await self.delivery(name, delivery_id)
        if recorded is None:  # the conflict was this very row, and rows are never deleted
            raise StorageError(f"delivery {delivery_id!r} of trigger {name} was neither recorded nor found; retry")
        return recorded

    # ----- signed requests (I19) ----------------------------------------------------------------------

    async def claim_signed(
        self, source: str, digest: str, delivery_id: str, kept_until_s: float | None
    ) -> tuple[str, bool]:
        """Claim what a signed request signed for `delivery_id`; the delivery id the claim is bound to
        (this one, or the one the same signed content first came with), and whether the run that delivery
        id started was purged (issue 34)."""
        params = {"source": source, "digest": digest, "delivery_id": delivery_id, "kept_until_s": kept_until_s}
        row = await self.db.fetch_one("triggers.claim_signed", params)
        if row is None:  # an upsert returns its row, always
            raise StorageError(f"the claim of {source}'s delivery {delivery_id!r} returned nothing; retry")
        return str(row["delivery_id"]), bool(row["purged"])

    # ----- ticket events -----------------------------------------------------------------------------

    async def event_runs(self, event_id: str) -> list[EventRun]:
        """The runs an event started, once they are on the synchronous standby (I20: not started again)."""
        rows = await self.db.fetch_all("triggers.ticket_event_runs", {"event_id": event_id})
        return [EventRun(r["event_id"], r["agent"], str(r["run_id"])) for r in rows]

    async def record_event_run(
        self, event_id: str, agent: str, run_id: str, webhook_event: str, issue_key: str, body_sha256: str
    ) -> str:
        """Record the run an event started for an agent; the run recorded first when it was already (once
        it is on the synchronous standby, I20)."""
        params = {"event_id": event_id, "agent": agent, "run_id": run_id, "webhook_event": webhook_event,
                  "issue_key": issue_key, "body_sha256": body_sha256}  # fmt: skip
        row = await self.db.fetch_one("triggers.record_ticket_event", params)
        if row is None:
            row = await self.db.fetch_one("triggers.ticket_event_run", {"event_id": event_id, "agent": agent})
            if row is None:  # the conflict was this very row, and rows are never deleted
                raise StorageError(f"ticket event {event_id!r} for agent {agent} was neither recorded nor found; retry")
        return str(row["run_id"])


def _state(row: Row) -> SecretState:
    return SecretState(int(row["n"]), bool(row["active"]), row["retired_at"], row["expires_at"])
