"""Which runs hand their answer on, and which are resumed after their process died (I12, I13)."""

from __future__ import annotations

import pytest

from ticketiq.engine.resume import ENTRY_CHANNELS, hands_on, not_resumed


@pytest.mark.parametrize(
    ("channel", "expected"),
    [("a2a", True), ("copilot", True), ("teams", True), ("cron", True), ("api", False), ("delegation", False),
     ("webhook", False), ("ticket_event", False)],
)  # fmt: skip
def test_entry_points_whose_answer_goes_somewhere_hand_it_on_as_a_step_of_its_own(channel: str, expected: bool) -> None:
    assert hands_on(channel) is expected


@pytest.mark.parametrize("channel", sorted(ENTRY_CHANNELS))
def test_with_the_setting_false_a_lost_entry_run_that_may_not_wait_is_failed_naming_the_setting(channel: str) -> None:
    why = not_resumed(channel, may_wait=False, crash_resume_entries=False)
    assert why is not None and "TICKETIQ_CRASH_RESUME_ENTRIES is false" in why and channel in why
    assert not_resumed(channel, may_wait=False, crash_resume_entries=True) is None


@pytest.mark.parametrize("channel", ["api", "a2a", "delegation", *sorted(ENTRY_CHANNELS)])
def test_a_run_that_may_wait_and_a_run_of_no_entry_point_are_always_resumed(channel: str) -> None:
    assert not_resumed(channel, may_wait=True, crash_resume_entries=False) is None
    if channel not in ENTRY_CHANNELS:
        assert not_resumed(channel, may_wait=False, crash_resume_entries=False) is None
