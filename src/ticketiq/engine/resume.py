"""Which lost runs are resumed, and the plan for the calls the last checkpointed step left (I6, I9, I10,
I12, I13, I15).

Used whenever a run goes on from its checkpoint: after a takeover, after a decision woke it, and when
every request of a step was decided before it could suspend. This module only plans, from plain data;
the driver carries the plan out (every call made again passes every gate as it stands now).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ticketiq.engine import approvals
from ticketiq.engine.seal import SEAL_FORMAT
from ticketiq.engine.settlement import CallRow, Route, ToolNow, read_back_wait, route
from ticketiq.engine.state import STATE_FORMAT, PlannedCall
from ticketiq.storage.rows import Approval, CallRecord
from ticketiq.tools.base import ToolClass


@dataclass(frozen=True)
class LeftCall:
    call: PlannedCall  # with the class it is settled as (I10)
    route: Route
    row: CallRecord | None
    approval: Approval | None  # the request filed for exactly this call (I15)
    binding: str
    wait_s: float = 0.0  # I14: how long to wait before reading it back


def effective(call: PlannedCall, row: CallRecord | None, class_now: ToolClass | None) -> PlannedCall:
    """I10: a call once marked (or planned) as changing stays so; one planned as a read whose tool now
    changes something is treated as the write it has become."""
    marked = ToolClass(row.tool_class) if row else call.tool_class
    if marked.changes:
        return call.with_class(marked)
    if class_now is not None and class_now.changes:
        return call.with_class(class_now)
    return call


def plan(
    run_id: str,
    calls: list[PlannedCall],
    rows: dict[int, CallRecord],
    filed: list[Approval],
    tool_now: Callable[[str], tuple[ToolNow, ToolClass | None]],
    step: int,
) -> list[LeftCall]:
    """One entry per call the step left, in the step's order."""
    out = []
    for planned in calls:
        row = rows.get(planned.idx)
        now, class_now = tool_now(planned.tool)
        call = effective(planned, row, class_now)
        bound_by = approvals.binding(run_id, step, call.idx, call.tool, call.step_key, call.args)
        approval = approvals.for_call(filed, bound_by)
        call_row = None if row is None else _call_row(row)
        taken = route(call_row, now, approval.status if approval else None)
        wait_s = read_back_wait(taken, row.in_flight_s if row else 0.0, call_row)
        out.append(LeftCall(call, taken, row, approval, bound_by, wait_s))
    return out


def _call_row(row: CallRecord) -> CallRow:
    # I11: a row without a step key is a call whose provider id is only a position.
    marked = ToolClass(row.tool_class)
    return CallRow(row.status, marked, row.sent_key, row.outcome, row.remote_ref, position_only=row.step_key is None)


# ----- which runs are resumed, and which hand their answer on (I12, I13) -------------------------

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


# ----- versioned checkpoints: which formats this release resumes (issue 31, migration 031) -------------
# Every checkpoint row records the format of its state and of its seal, and every process registers the
# newest of each it knows (`processes.state_format`, `.seal_format`; NULL for a release before migration
# 031, which knew state format 1 and seal formats 1 and 2). A release reads every format from the previous
# release's onwards, so a roll can go either way between two releases. A checkpoint of a newer format is
# left for a process that knows it: no take gives it to one that does not (take_run checks the process it
# takes for), and the sweeps pass it by while no live process knows it, so it is never failed, rewritten
# or counted as a loss; the run's `waiting_for` says what it waits for (views/runs.py).


@dataclass(frozen=True)
class Known:
    """The newest checkpoint formats a process knows (what it registers, and what it writes)."""

    state_format: int = STATE_FORMAT
    seal_format: int = SEAL_FORMAT


THIS_RELEASE = Known()


def format_unknown(state_format: int, seal_format: int, known: Known | None = None) -> str | None:
    """Why a checkpoint of these formats cannot be resumed by a process that knows `known` (this
    release, by default), or None."""
    known = known or THIS_RELEASE
    if state_format > known.state_format or seal_format > known.seal_format:
        return (
            f"its checkpoint has state format {state_format} and seal format {seal_format}; this release "
            f"knows state formats up to {known.state_format} and seal formats up to {known.seal_format}"
        )
    return None


def waits_for_release(state_format: int, seal_format: int) -> str:
    """What a run whose checkpoint no live process knows waits for, in the run's `waiting_for`."""
    return f"a process that knows checkpoint state format {state_format} and seal format {seal_format}"
