"""How the calls a checkpointed step left are routed when the run goes on (I6, I9, I10).

A pure decision over the call's row (what was marked and recorded), the tool as registered now, and
the approval filed for it, if any. The driver in `route.py` carries it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from ticketiq.tools.base import ToolClass

# A keyed write is resent with the same key only when its vendor dedupes for longer than a resume can
# take: TTL + sweep + the loss limit's worth of takeovers is minutes; an hour is a safe floor. SQS and
# Discord dedupe for minutes and are never resent.
RESUME_HORIZON_S = 3600.0


class Route(StrEnum):
    REUSE = "reused"  # its outcome is recorded: not made again
    MAKE = "made"  # never sent (or a read, I9): make it now, through every gate as it stands
    RESEND_SAME_KEY = "resent_same_key"  # the vendor dedupes on the key for longer than a resume
    READ_BACK = "read_back"  # find the write again by its key
    UNKNOWN = "unknown_not_sent"  # no way to tell: report it, never resend
    DELEGATION = "asked_again_by_delegation_key"
    APPROVAL_DECIDED = "approval_decided"  # a person decided meanwhile: use that decision


@dataclass(frozen=True)
class CallRow:
    status: str  # pending / in_doubt / done / settled
    tool_class: ToolClass  # as marked: a marked write stays a write (I10)
    sent_key: str | None
    outcome: Any = None


@dataclass(frozen=True)
class ToolNow:
    exists: bool
    has_reader: bool
    dedupe_window_s: float | None


def route(row: CallRow | None, tool_now: ToolNow, approval_status: str | None = None) -> Route:
    """Decide what becomes of one call of the step a run resumes at."""
    if row is None or row.status == "pending":
        # Never marked, so never sent (a write is marked before it is sent, I2; a read never is).
        if approval_status in ("approved", "rejected"):
            return Route.APPROVAL_DECIDED
        return Route.MAKE
    if row.status in ("done", "settled"):
        return Route.REUSE
    # In doubt: it may or may not have reached its vendor. The class it was marked with rules (I10).
    if row.tool_class in (ToolClass.DELEGATION, ToolClass.SUBAGENT):
        return Route.DELEGATION
    if (
        row.tool_class is ToolClass.KEYED_WRITE
        and row.sent_key is not None
        and tool_now.exists
        and (tool_now.dedupe_window_s or 0.0) >= RESUME_HORIZON_S
    ):
        return Route.RESEND_SAME_KEY
    if tool_now.exists and tool_now.has_reader and row.sent_key is not None:
        return Route.READ_BACK
    return Route.UNKNOWN


UNKNOWN_FOR_MODEL = (
    "outcome unknown: the call was in flight when its process stopped and cannot be read back; it was not sent again"
)
