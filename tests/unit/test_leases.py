from __future__ import annotations

import time

import pytest

from ticketiq.engine.leases import (
    HeldLease,
    LeaseKeeper,
    deadline_after,
    lost_leases,
    renewal_delay,
    renewals_lost,
)
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


def test_renewals_are_lost_once_they_fail_past_a_lease_deadline() -> None:
    assert renewals_lost([10.0, 20.0], now=10.0, failing=True)  # the first deadline is enough
    assert not renewals_lost([10.0, 20.0], now=9.9, failing=True)  # every lease still in date


def test_a_lease_past_its_deadline_while_renewals_answer_is_not_the_keepers_loss() -> None:
    # Taken by a statement slower than the TTL: that run's lease alone is lost, by its own check.
    assert not renewals_lost([10.0], now=11.0, failing=False)


def test_holding_nothing_nothing_is_lost() -> None:
    assert not renewals_lost([], now=100.0, failing=True)


def test_the_next_renewal_comes_an_interval_after_one_that_answered() -> None:
    assert renewal_delay(started=100.0, now=100.1, interval_s=2.0, failed=False) == pytest.approx(1.9)


def test_a_failed_renewal_is_tried_again_sooner_and_one_that_used_its_interval_at_once() -> None:
    assert renewal_delay(started=100.0, now=100.1, interval_s=2.0, failed=True) == pytest.approx(0.4)
    assert renewal_delay(started=100.0, now=102.0, interval_s=2.0, failed=True) == 0.0
    assert renewal_delay(started=100.0, now=107.0, interval_s=2.0, failed=False) == 0.0


def keeper_told(failing: bool) -> tuple[LeaseKeeper, list[str]]:
    told: list[str] = []
    keeper = LeaseKeeper("postgresql://nowhere/none", "me", 8.0, 2.0, 1.0, on_lost=told.append)
    keeper.failing = failing
    return keeper, told


def test_a_lease_dropped_past_its_deadline_while_renewals_fail_gives_every_lease_up() -> None:
    keeper, told = keeper_told(failing=True)
    now = time.monotonic()
    expired = keeper.hold("a", acquired_sent_at=now - 60, attempt=1)
    fresh = keeper.hold("b", acquired_sent_at=now, attempt=1)
    keeper.drop(expired)  # its driver saw the deadline pass first and ended
    assert told and "renewals failed" in told[0]
    assert keeper.held == {}
    assert fresh.lost.is_set()


def test_a_lease_dropped_in_date_or_while_renewals_answer_costs_nothing_else() -> None:
    keeper, told = keeper_told(failing=True)
    now = time.monotonic()
    keeper.drop(keeper.hold("a", acquired_sent_at=now, attempt=1))  # the run ended in date
    keeper, told_answering = keeper_told(failing=False)
    keeper.drop_lease("none")
    keeper.drop(keeper.hold("b", acquired_sent_at=now - 60, attempt=1))
    fresh = keeper.hold("c", acquired_sent_at=now, attempt=1)
    assert told == [] and told_answering == []
    assert not fresh.lost.is_set()


async def test_a_lease_being_released_is_not_renewed_nor_reported_lost() -> None:
    # The run's final statement deletes its lease; a renewal crossing it must not call it taken over.
    from ticketiq.engine.leases import LeaseKeeper

    keeper = LeaseKeeper("postgresql://unused", "me", ttl_s=8.0, interval_s=2.0, margin_s=1.0)
    ending = keeper.hold("r1", time.monotonic() - 1, attempt=1)
    ending.releasing = True
    assert await keeper.renew_once() is False  # nothing left to renew: no statement, no connection
    assert not ending.lost.is_set()
