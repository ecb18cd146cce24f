"""The in-doubt protocol, driven once (I2, I3, I9, I14): how a write that must never be blindly sent again
is sent, and how one left in doubt is settled. It drives an agent run's tool call (`engine/calls.py`), a
workflow's tool step (`jobs/workflow.py`) and the fine-tune's upload and create (`jobs/fine_tune.py`);
what differs between them is behind `InDoubtWrite`, which each implements.

- `send`: the lease checked, the send window opened (before the mark, so it closes no later than the
  mark's horizon), the write marked in doubt by one fenced statement (I2), sent inside its window (I3,
  I14), its outcome recorded. An answer that leaves its effect open is put back in doubt and settled at
  once where the write's user says so (`reopens`).
- `settle`: the route `settlement.route` decided for a write left in doubt, carried out. A read-back
  first waits, holding the lease, until the write can no longer be in flight, as the database clock
  says (I14); found, it is done; absent, it is sent once more under its key, through the gates as they
  stand now; the vendor cannot say, or there is no reader: unknown, never sent again (I9). A keyed
  write its vendor dedupes for longer than a resume, and a delegation, is sent again under its key; an
  idempotent write (its tool trusted to change nothing more) with the same arguments.

The decisions are pure and tested apart (`settlement.route`, `jobs/in_doubt.py`); this is the thin I/O
around them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from ticketiq.engine.settlement import Happened, Route, sent_once_if_absent
from ticketiq.runtime.faults import Faults
from ticketiq.tools.base import ReadBack, SendWindow, ToolClass

Answer = TypeVar("Answer")  # what a send answers
Done = TypeVar("Done", covariant=True)  # what a write comes to: a run's tool result, a step's outcome, an id

# How often a wait out of a write in flight looks at its lease (a lost lease also wakes it at once).
LEASE_LOOK_S = 0.5


class Unknown(StrEnum):
    """Why a write in doubt is reported unknown, and never sent again (I9)."""

    NO_WAY = "has no reader and its vendor does not dedupe on the key long enough"  # said of the write
    CANNOT_SAY = "the vendor could not say whether it landed"
    NOT_RESENT = "the remote agent knows no task by the id it gave"


@dataclass(frozen=True)
class Settled(Generic[Done]):
    """What became of a write in doubt (I8), and what it came to."""

    happened: Happened
    done: Done


class InDoubtWrite(Protocol[Answer, Done]):
    """One write the protocol drives: what only its user knows."""

    @property
    def marked(self) -> ToolClass:
        """I10: the class it was marked with, which rules its settlement."""
        ...

    @property
    def budget_s(self) -> float:
        """How long its send window stays open (the write budget)."""
        ...

    @property
    def faults(self) -> Faults:
        """Where the process is killed on purpose, for the kill trials (`after_mark`, `after_send`)."""
        ...

    @property
    def lost(self) -> asyncio.Event:
        """Set the moment the lease is lost: it wakes a wait at once."""
        ...

    def check(self) -> None:
        """I3: raise the fence's exception once no write may be sent (the lease lost or past its deadline)."""

    def lease_deadline(self) -> float:
        """The lease deadline (monotonic) the send window closes at; inf where each try checks it."""
        ...

    async def mark(self) -> None:
        """I2, I14: mark it in doubt, with how long it can be in flight, in one statement fenced by the attempt."""

    async def send(self, window: SendWindow) -> Answer:
        """Send it, no try outside `window`."""
        ...

    def reopens(self, answer: Answer, how: str | None) -> Route | None:
        """The route of an answer that left its effect open and is settled at once; None: it is recorded."""
        ...

    async def record(self, answer: Answer, how: str | None) -> Done:
        """I2: its outcome; `how` names a settlement's send (None, or "sent", for a first send)."""
        ...

    async def in_flight_s(self) -> float:
        """I14: seconds until it can no longer be in flight, on the database clock; 0 once it cannot."""
        ...

    async def read_back(self) -> ReadBack:
        """Look for it at its vendor, by its key or what it carries."""
        ...

    async def found(self, read: ReadBack) -> Done:
        """It landed: what it came to, recorded."""
        ...

    async def unknown(self, why: Unknown) -> Done:
        """Its outcome cannot be told: reported and recorded, never sent again."""
        ...

    async def gate(self) -> Settled[Done] | None:
        """Before it is sent again, the gates as they stand now (I6, I15): None when it may be sent; what
        became of it when not."""
        ...


async def send(write: InDoubtWrite[Answer, Done], how: str | None = None) -> Done:
    """Mark in doubt (I2), send inside the write's window (I3, I14), record the outcome (I2). `how`: a
    settlement's send."""
    write.check()
    # The window opens before the mark is sent, so it closes no later than the mark's own horizon.
    window = SendWindow(budget_ends=time.monotonic() + write.budget_s, lease_deadline=write.lease_deadline())
    await write.mark()
    write.faults.hit("after_mark")
    answer = await write.send(window)
    write.faults.hit("after_send")
    reopened = write.reopens(answer, how)
    if reopened is not None:
        return (await settle(write, reopened)).done
    return await write.record(answer, how)


async def settle(write: InDoubtWrite[Answer, Done], taken: Route) -> Settled[Done]:
    """A write in doubt, which may or may not have reached its vendor: never blindly sent again (I9).
    `taken`: what `settlement.route` decided for it."""
    if taken is Route.READ_BACK:
        await wait_out(write)  # I14: until it can no longer be in flight
        read = await write.read_back()
        if read.found is True:
            return Settled(Happened.FOUND, await write.found(read))
        if read.found is None:
            return Settled(Happened.UNKNOWN_NOT_SENT, await write.unknown(Unknown.CANNOT_SAY))
        if not sent_once_if_absent(write.marked):
            return Settled(Happened.UNKNOWN_NOT_SENT, await write.unknown(Unknown.NOT_RESENT))
        # Read back and not there after it could no longer be in flight: it never landed.
        how, happened = Happened.SENT_ONCE.value, Happened.SENT_ONCE
    elif taken in (Route.RESEND_SAME_KEY, Route.DELEGATION):
        # A keyed write its vendor dedupes for longer than a resume takes, or a delegation asked again by
        # its key: sending it again applies it once.
        how, happened = taken.value, Happened.RESENT_SAME_KEY
    elif taken is Route.RESEND_SAME_ARGS:
        # Its tool changes nothing more when sent the same arguments again (I10: as marked).
        how, happened = taken.value, Happened.RESENT_SAME_ARGS
    else:
        return Settled(Happened.UNKNOWN_NOT_SENT, await write.unknown(Unknown.NO_WAY))
    refused = await write.gate()
    if refused is not None:
        return refused
    return Settled(happened, await send(write, how))


async def wait_out(write: InDoubtWrite[Answer, Done]) -> None:
    """I14: wait, holding the lease (renewed meanwhile), until the write can no longer be in flight."""
    ends = time.monotonic() + await write.in_flight_s()
    while (left := ends - time.monotonic()) > 0:
        write.check()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(left, LEASE_LOOK_S)):
                await write.lost.wait()
    write.check()
