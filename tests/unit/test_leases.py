from __future__ import annotations

import time

import pytest

from ticketiq.engine.leases import HeldLease, deadline_after, lost_leases
from ticketiq.errors import LeaseLost


def test_the_deadline_counts_from_when_the_renewal_was_sent() -> None:
    assert deadline_after(100.0, 8.0, 1.0) == 107.0


def test_leases_missing_from_the_renewal_answer_are_lost_unless_newer_than_it() -> None:
    held = {"checkpoint:a": 1.0, "checkpoint:b": 1.0, "checkpoint:c": 5.0}
    assert lost_leases(held, {"checkpoint:a"}, sent_at=4.0) == {"checkpoint:b"}


async def test_a_lease_past_its_deadline_or_lost_refuses_writes() -> None:
    now = time.monotonic()
    live = HeldLease("r", deadline=now + 60, since=now)
    live.check()
    expired = HeldLease("r", deadline=now - 0.001, since=now - 9)
    with pytest.raises(LeaseLost, match="deadline"):
        expired.check()
    live.lose("taken over")
    with pytest.raises(LeaseLost, match="taken over"):
        live.check()
