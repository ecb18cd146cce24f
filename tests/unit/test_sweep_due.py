from __future__ import annotations

from ticketiq.leader.sweep import LAPSE_MARGIN_S, sweep_due


def test_with_no_lease_held_the_sweep_keeps_its_interval() -> None:
    assert sweep_due(100.0, 3.0, None) == 103.0


def test_renewed_leases_lapse_later_than_the_interval_so_it_is_kept() -> None:
    assert sweep_due(100.0, 3.0, 7.5) == 103.0


def test_a_lease_about_to_lapse_is_swept_just_after_it_does() -> None:
    assert sweep_due(100.0, 3.0, 1.2) == 100.0 + 1.2 + LAPSE_MARGIN_S


def test_a_lease_already_lapsed_is_swept_at_once_but_not_in_a_busy_loop() -> None:
    assert sweep_due(100.0, 3.0, -0.4) == 100.0 + LAPSE_MARGIN_S
