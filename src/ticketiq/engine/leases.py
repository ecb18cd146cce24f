"""The lease renewer (I4) and each run's local lease deadline (I3).

All of a process's leases are renewed by one statement every `lease_renew_s`, on a connection of its
own so that a busy pool never delays it. The answer names the leases still ours: a run missing from it
was taken over and stops at once. A run also stops sending writes once its deadline passes: the time
its last successful renewal was *sent* + TTL - margin, by the monotonic clock, so a renewal that took
long to come back never stretches the deadline.

A renewal that does not answer within the renewal interval has failed: its connection is closed and
the next try opens a new one (within the connect timeout), so a connection whose peer went silent
costs one interval, not every lease. When renewals fail until a lease held is past its deadline, the
keeper gives up every lease and reports it (`on_lost`): the process treats it as a lost liveness mark.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ticketiq.errors import LeaseLost, StorageError
from ticketiq.runtime.background import Background
from ticketiq.storage import database, leader_store
from ticketiq.storage.database import DEFAULT_LIMITS, ConnectionLimits

log = logging.getLogger(__name__)


def lease_name(run_id: str) -> str:
    return f"checkpoint:{run_id}"


def deadline_after(sent_at: float, ttl_s: float, margin_s: float) -> float:
    """I3: the last instant a write may be sent under a renewal sent at `sent_at` (monotonic)."""
    return sent_at + ttl_s - margin_s


def lost_leases(held_since: dict[str, float], renewed: set[str], sent_at: float) -> set[str]:
    """Leases held before the renewal was sent that its answer did not name: taken over (I4).
    A lease acquired after the renewal was sent cannot be in its answer and is not lost."""
    return {name for name, since in held_since.items() if since < sent_at and name not in renewed}


def renewals_lost(deadlines: Iterable[float], now: float, failing: bool) -> bool:
    """Whether the keeper's leases are as good as lost: its renewals are failing (the last try did not
    answer in time) and a lease it held is past its local deadline (monotonic `now`), so renewals have
    not got through for TTL - margin. That lease sends nothing more (I3) and lapses in the database,
    where a sweep may claim it, back to this same identity whose renewals fail, and lose it again. A
    lease past its deadline while renewals answer (acquired by a statement slower than the TTL) is that
    run's loss alone."""
    return failing and any(now >= deadline for deadline in deadlines)


# After a failed renewal the next try comes this share of an interval after the failed one began: a
# passing failure then costs no lease, and one that used up its interval (no answer) is retried at once.
RETRY_SHARE = 0.25


def renewal_delay(started: float, now: float, interval_s: float, failed: bool) -> float:
    """Seconds to wait before the next renewal, from when the last try `started` (monotonic)."""
    period = interval_s * RETRY_SHARE if failed else interval_s
    return max(0.0, period - (now - started))


@dataclass(eq=False)
class HeldLease:
    run_id: str
    deadline: float
    since: float
    attempt: int = 0  # the attempt that took the lease: only its driver's end drops it
    # Set while the run's final statement (which deletes the lease) is on its way: no longer renewed,
    # so a renewal that crosses that statement does not report the lease as taken over.
    releasing: bool = False
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    why: str = ""

    def check(self) -> None:
        """Raise LeaseLost if no write may be sent now (I3)."""
        if self.lost.is_set():
            raise LeaseLost(self.run_id, self.why or "taken over")
        if time.monotonic() >= self.deadline:
            raise LeaseLost(self.run_id, "local lease deadline passed before renewal")

    def lose(self, why: str) -> None:
        if not self.lost.is_set():
            self.why = why
            self.lost.set()


def _ignore(why: str) -> None:
    return None


class LeaseKeeper:
    def __init__(
        self,
        url: str,
        holder: str,
        ttl_s: float,
        interval_s: float,
        margin_s: float,
        limits: ConnectionLimits = DEFAULT_LIMITS,
        on_lost: Callable[[str], None] = _ignore,
    ) -> None:
        self.url = url
        self.holder = holder
        self.ttl_s = ttl_s
        self.interval_s = interval_s
        self.margin_s = margin_s
        self.limits = limits
        self.on_lost = on_lost  # told when renewals failed past a lease's deadline and every lease went
        self.held: dict[str, HeldLease] = {}  # by lease name
        self.renewals = 0  # statements sent, for benchmarks and metrics
        self.lapses = 0  # leases found lost
        self.failures = 0  # renewals that failed or did not answer in time
        self.failing = False  # the last renewal failed: set until one answers
        self._conn: database.Connection | None = None
        self._background = Background("lease-renewer", self.run)

    def hold(self, run_id: str, acquired_sent_at: float, attempt: int) -> HeldLease:
        """Register a run's lease just acquired under `attempt` by a statement sent at `acquired_sent_at`."""
        return self.hold_lease(lease_name(run_id), acquired_sent_at, run_id, attempt)

    def hold_lease(self, name: str, acquired_sent_at: float, run_id: str = "", attempt: int = 0) -> HeldLease:
        lease = HeldLease(
            run_id=run_id or name,
            deadline=deadline_after(acquired_sent_at, self.ttl_s, self.margin_s),
            since=acquired_sent_at,
            attempt=attempt,
        )
        self.held[name] = lease
        return lease

    def drop(self, lease: HeldLease) -> None:
        """Stop renewing this lease, unless a later attempt's lease of the same run replaced it."""
        name = lease_name(lease.run_id)
        if self.held.get(name) is lease:
            del self.held[name]
            self._dropped(lease)

    def drop_lease(self, name: str) -> None:
        lease = self.held.pop(name, None)
        if lease is not None:
            self._dropped(lease)

    def _dropped(self, lease: HeldLease) -> None:
        # A driver or the elector that saw its deadline pass first gives its lease up: the failing
        # renewals lost it all the same.
        if renewals_lost([lease.deadline], time.monotonic(), self.failing):
            self._give_up()

    def lose_all(self, why: str) -> None:
        for name in list(self.held):
            self._lose(name, why)

    def _lose(self, name: str, why: str) -> None:
        lease = self.held.pop(name, None)
        if lease is None:
            return
        self.lapses += 1
        lease.lose(why)
        log.warning("lease %s lost (%s)", name, why)

    async def renew_once(self) -> bool:
        """Renew every lease held in one statement; False when nothing is held (no statement)."""
        held_since = {name: lease.since for name, lease in self.held.items() if not lease.releasing}
        if not held_since:
            return False
        if self._conn is None or self._conn.closed:
            self._conn = await database.connect(self.url, self.limits)  # within the connect timeout
        sent_at = time.monotonic()
        # An answer later than the interval is no answer: the next renewal is due by then.
        renewed = await leader_store.renew(self._conn, self.holder, self.ttl_s, held_since, within_s=self.interval_s)
        self.renewals += 1
        for name in lost_leases(held_since, renewed, sent_at):
            lease = self.held.get(name)
            if lease is not None and lease.releasing:
                continue  # its run ended or began to wait meanwhile: the statement that did so deleted it
            self._lose(name, "not renewed: another process holds it")
        deadline = deadline_after(sent_at, self.ttl_s, self.margin_s)
        for name, lease in self.held.items():
            if name in renewed:
                lease.deadline = max(lease.deadline, deadline)
        return True

    async def run(self) -> None:
        while True:
            started = time.monotonic()
            failed = False
            try:
                if await self.renew_once():
                    self.failing = False
            except StorageError as exc:
                # Deadlines keep running down: runs send nothing once theirs pass (I3).
                failed = True
                log.error("lease renewal failed: %s", exc)
            except Exception:
                failed = True
                log.exception("lease renewal failed")
            if failed:
                self.failing = True
                self.failures += 1
                await self._disconnect()  # the next try opens a new connection
            now = time.monotonic()
            if renewals_lost((lease.deadline for lease in self.held.values()), now, self.failing):
                self._give_up()
            await asyncio.sleep(renewal_delay(started, now, self.interval_s, failed))

    def _give_up(self) -> None:
        """Every lease goes, and the process is told: it comes back under a new identity, whose runs a
        leader then claims once (I5) rather than over and over."""
        why = "lease renewals failed past a lease's deadline"
        log.error("%s: %s gives up its %d leases", why, self.holder, len(self.held))
        self.lose_all(why)
        self.on_lost(why)

    async def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                await self._conn.close()
            self._conn = None

    def start(self) -> None:
        self._background.start()

    async def stop(self) -> None:
        await self._background.stop()
        await self._disconnect()
