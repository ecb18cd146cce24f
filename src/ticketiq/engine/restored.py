"""How a restored run's write is sent (I24): a pure decision beside `settlement.route`, tested apart.

A database restored from a backup has forgotten what happened after the backup; the vendors have not. A run
that had not ended at the backup's point may have planned and sent, after it, the very calls it plans again
now: its step keys are derived (I11), so the same planned call carries the same key. So each write such a
run plans is settled as a call in doubt is after a crash, before it is sent: read back (found: done; absent:
sent once), or sent again under its key where the vendor dedupes for longer than a resume, or with the same
arguments where its tool is idempotent. Where neither holds (no reader, no long dedupe, a key that is only a
position) the run waits for an operator, asked with the reason: approved, the write is sent (the operator
takes the risk); rejected, it is not, and the model is told.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ticketiq.engine.settlement import CallRow, Route, ToolNow, route
from ticketiq.tools.base import ToolClass


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


def decide(tool_class: ToolClass, tool_now: ToolNow, key: str | None, stable_key: bool,
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
