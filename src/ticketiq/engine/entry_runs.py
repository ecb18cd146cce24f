"""Which runs hand their answer on, and which are resumed after their process died (I12, I13).

Pure decisions over a run's channel (its entry point) and whether it may wait, unit-tested without a
database. The driver asks them; the hand-on itself is the run store's statement.
"""

from __future__ import annotations

# Entry points whose answer goes somewhere besides the run row and its transcript: an A2A task, a
# co-pilot caller, a Teams reply, a cron fire's outcome. Handing it on is a step of its own, written
# ahead (the run is `answered` with its answer kept), so a process that dies before it is replaced by
# one that hands on the kept answer (I12).
HAND_ON_CHANNELS = frozenset({"a2a", "copilot", "teams", "cron"})

# Entry points whose runs TICKETIQ_CRASH_RESUME_ENTRIES covers (I13). A run of these that may wait is
# resumed whatever the setting says.
ENTRY_CHANNELS = frozenset({"cron", "ticket_event", "webhook", "copilot", "teams"})


def hands_on(channel: str) -> bool:
    """Whether a run of this entry point hands its answer on as a step of its own."""
    return channel in HAND_ON_CHANNELS


def not_resumed(channel: str, may_wait: bool, crash_resume_entries: bool) -> str | None:
    """Why a run that was lost is failed instead of resumed, or None when it is resumed (I13)."""
    if may_wait or crash_resume_entries or channel not in ENTRY_CHANNELS:
        return None
    return (
        f"its process stopped and runs of the {channel} entry point are not resumed: "
        "TICKETIQ_CRASH_RESUME_ENTRIES is false (set it to true to resume them from their last step)"
    )
