"""How the calls a checkpointed step left are routed when the run goes on (I6, I9, I10, I14, I15).

A pure decision over the call's row (what was marked and recorded), the tool as registered now, and
the request filed for exactly this call, if any. The driver carries the route out and reports what
happened; both go into the `agent.run.crash_resumed` audit (I8).
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
    """What the resume plans for a call."""

    REUSE = "reused"  # its outcome is recorded: not made again
    MAKE = "made"  # never sent (or a read, I9): make it now, through every gate as it stands
    RESEND_SAME_KEY = "resent_same_key"  # the vendor dedupes on the key for longer than a resume
    RESEND_SAME_ARGS = "resent_same_args"  # an idempotent write: the same arguments change nothing more
    READ_BACK = "read_back"  # once it can no longer be in flight (I14), find the write by its key
    UNKNOWN = "unknown_not_sent"  # no way to tell: report it, never resend
    DELEGATION = "asked_again_by_delegation_key"
    APPROVAL_DECIDED = "approval_decided"  # a person decided this very call meanwhile: use that decision


class Happened(StrEnum):
    """What became of a call the resume routed (I8: the audit says what happened, not what was planned)."""

    FOUND = "found"  # read back: it had landed
    SENT_ONCE = "sent_once"  # read back: it had not landed, so it was sent now, once
    RESENT_SAME_KEY = "resent_same_key"  # sent again with its key (a keyed write, or a delegation asked again)
    RESENT_SAME_ARGS = "resent_same_args"  # an idempotent write sent again with the same arguments
    UNKNOWN_NOT_SENT = "unknown_not_sent"  # the model is told the outcome is unknown; not sent again
    REFUSED = "refused"  # a gate as it stands now refused it (for a write in doubt: not sent again)
    APPROVAL_FILED = "approval_filed"  # the approval gate now holds it: a request waits for a person
    APPROVAL_DECIDED = "approval_decided"  # a person's decision on this very call was carried out
    INPUT_ASKED = "input_asked"  # the model's question waits for a person's input
    MADE = "made"  # made now, through every gate
    REUSED = "reused"  # its recorded outcome was used


@dataclass(frozen=True)
class CallRow:
    status: str  # pending / in_doubt / done / settled
    tool_class: ToolClass  # as marked: a marked write stays a write (I10)
    sent_key: str | None
    outcome: Any = None
    reference: str | None = None  # what the send recorded to be found by: a remote agent's task id
    # I11: the provider's call id is only a position (`call_0`): no key was derived for the call, it went
    # out with a fresh one, and it is settled as any other write, never resent on the strength of a key.
    position_only: bool = False


@dataclass(frozen=True)
class ToolNow:
    exists: bool
    has_reader: bool
    dedupe_window_s: float | None


def route(row: CallRow | None, tool_now: ToolNow, approval_status: str | None = None) -> Route:
    """Decide what becomes of one call of the step a run goes on from. `approval_status` is that of
    the request filed for exactly this call (I15), if any."""
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
    if row.tool_class is ToolClass.REMOTE_AGENT:
        # I9: a message to a remote agent is never sent again. Its task id, recorded the moment the
        # agent named it, finds it (GetTask); without one there is nothing to find it by.
        if row.reference is not None and tool_now.exists and tool_now.has_reader:
            return Route.READ_BACK
        return Route.UNKNOWN
    if row.tool_class is ToolClass.IDEMPOTENT_WRITE and tool_now.exists:
        # Its tool says (and the operator trusts) that the same arguments change nothing more: sent again.
        return Route.RESEND_SAME_ARGS
    if (
        row.tool_class is ToolClass.KEYED_WRITE
        and not row.position_only
        and row.sent_key is not None
        and tool_now.exists
        and (tool_now.dedupe_window_s or 0.0) >= RESUME_HORIZON_S
    ):
        return Route.RESEND_SAME_KEY
    if tool_now.exists and tool_now.has_reader and row.sent_key is not None:
        return Route.READ_BACK
    return Route.UNKNOWN


def read_back_wait(route_taken: Route, in_flight_s: float, row: CallRow | None = None) -> float:
    """I14: seconds to wait before a write in doubt may be read back: until the process that marked it
    can no longer have it in flight. Only a read-back waits: a keyed resend is deduped by its vendor, a
    delegation is found by its key, and an unknown outcome is never sent again. A remote agent's call
    with its task id recorded does not wait either: the id came back in the answer to the send, so the
    send is no longer in flight, and the call is never sent again whatever GetTask says."""
    if route_taken is not Route.READ_BACK:
        return 0.0
    if row is not None and row.tool_class is ToolClass.REMOTE_AGENT and row.reference is not None:
        return 0.0
    return max(0.0, in_flight_s)


def sent_once_if_absent(tool_class: ToolClass) -> bool:
    """I9: whether a write read back and not found is sent once now. Not a remote agent's message: a
    task id the agent does not know (it forgot the task, or another agent answers at that address) is
    no proof that the message never reached it, so it is reported unknown and never sent again."""
    return tool_class is not ToolClass.REMOTE_AGENT


# ----- a restored run's writes (I24) ------------------------------------------------------------------
# A database restored from a backup has forgotten what happened after the backup; the vendors have not. A run
# that had not ended at the backup's point may have planned and sent, after it, the very calls it plans again
# now: its step keys are derived (I11), so the same planned call carries the same key. So each write such a
# run plans is settled as a call in doubt is (`route`) before it is sent: read back (found: done; absent: sent
# once), or sent again under its key where its vendor dedupes for longer than a resume, or with the same
# arguments where its tool is idempotent. Where neither holds (no reader, no long dedupe, a key that is only
# a position) the run waits for an operator, asked why: approved, the write is sent (the operator takes the
# risk); rejected, it is not, and the model is told.


class Restored(StrEnum):
    """What a restored run does with one write it plans."""

    SETTLE = "settled_as_in_doubt"  # `route` says how: read back, or sent again under its key or arguments
    HOLD = "held_for_an_operator"  # no way to tell whether it was sent: a person decides
    SEND = "sent_on_an_operator_word"  # an operator let it go on: sent, once
    REFUSE = "not_sent_on_an_operator_word"  # an operator said no: not sent, the model is told


@dataclass(frozen=True)
class RestoreDecision:
    what: Restored
    route: Route | None = None  # for SETTLE


def decide_restored(tool_class: ToolClass, tool_now: ToolNow, key: str | None, stable_key: bool,
           hold_status: str | None) -> RestoreDecision:  # fmt: skip
    """One write a restored run plans, as if it were in doubt: `key` the key it goes out under, `stable_key`
    whether that key is derived (I11: not a fresh one, nor from a position-only call id), `hold_status` that
    of the operator's request filed for exactly this call after the restore, if any."""
    in_doubt = CallRow("in_doubt", tool_class, key if stable_key else None, position_only=not stable_key)
    taken = route(in_doubt, tool_now)
    # A remote agent's message has no task id yet to read it back by: `route` says unknown, as it should.
    if taken is not Route.UNKNOWN:
        return RestoreDecision(Restored.SETTLE, taken)
    if hold_status == "approved":
        return RestoreDecision(Restored.SEND)
    if hold_status in ("rejected", "withdrawn"):
        return RestoreDecision(Restored.REFUSE)
    return RestoreDecision(Restored.HOLD)


def hold_reason(tool: str, step: int, idx: int, restored_from: str | None, tool_now: ToolNow,
                stable_key: bool) -> str:  # fmt: skip
    """Why the operator is asked, in words they can act on (the run page and `waiting_for` show it)."""
    if not tool_now.exists:
        why = f"tool {tool} is no longer registered"
    elif not stable_key:
        why = "its key is not derived from the step (the model's call id is only a position)"
    else:
        window = tool_now.dedupe_window_s
        dedupe = "does not dedupe" if not window else f"dedupes for {window:g} s only"
        why = f"{tool} has no reader and its vendor {dedupe}"
    backup = f" ({restored_from})" if restored_from else ""
    return (
        f"restored from a backup{backup}: call {idx} of step {step} ({tool}) may have been sent after the "
        f"backup was taken, and {why}; resume the run to send it (the risk is yours), or stop it"
    )


UNKNOWN_FOR_MODEL = (
    "outcome unknown: the call was in flight when its process stopped and cannot be read back; it was not sent again"
)
