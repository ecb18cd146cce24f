"""A run's timeline (`GET /v1/runs/{id}/timeline`), assembled from its rows (what a follower of it is told
as it changes, `GET /v1/runs/{id}/events`, is `timeline_cursor.py`'s). Pure: the store reads, these decide
what is shown.

Each attempt: the process that held it, when it began and ended and how (finished, lost, handed_back,
stalled, waiting; None while it runs), and for one that took the run over after a loss, when the loss
was found, how long until the new attempt's first statement (`taken_after_s`), and what became of each
call the step it went on from left (`settled`, I8: the `crash_resumed` audit's words).

Each step: the attempt whose model call it was, when that call began, how long it took (`model_ms`),
when the step ended (its last call's outcome; the answer's end for the last step, which answered in
text), and its calls: key, in-doubt mark, send, outcome, status, how a takeover settled it, approval.

Two clocks, never mixed in one duration: the database's (an attempt's times, a call's `marked_at`, a
settlement's `at`) and the wall clock of the process that did the thing (a step's `started_at` and
`model_ms`, a call's `sent_at` and `outcome_at`, so a step's `ended_at`).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from ticketiq.engine import resume
from ticketiq.storage.rows import RunRecord, Waiting
from ticketiq.storage.timeline_store import ApprovalRow, AttemptRow, CallRow, ResumedRow, TimelineRows
from ticketiq.tools.builtin import REQUEST_INPUT
from ticketiq.views import run_list

# Calls a takeover found already done: nothing was settled for them.
_NOT_SETTLED = frozenset({"reused"})


# ----- the run ------------------------------------------------------------------------------------------


def run_view(run: RunRecord, waits: list[dict[str, Any]]) -> dict[str, Any]:
    """The run as `GET /v1/runs/{id}` answers it: `waits`, what it waits for, oldest first, as shown."""
    return {
        "id": run.id,
        "agent": run.agent,
        "status": run.status,
        "answer": run.answer,
        "error": run.error,
        "steps": run.step,
        "attempt": run.attempt,
        "losses": run.losses,
        "owner": run.owner,
        "channel": run.channel,
        "may_wait": run.may_wait,
        "parent_run_id": run.parent_run_id,
        "created_by": run.created_by,
        "stop_requested_at": run.stop_requested_at,
        # Held: no retention pass purges it (issue 34), whatever the policy says, until it is released.
        "held": run.held_at is not None,
        "hold": None if run.held_at is None else {"at": run.held_at, "by": run.held_by, "reason": run.hold_reason},
        # I24: found unfinished by a restore: each write it plans is settled before it is sent.
        "restored": None if run.restored_at is None else {"at": run.restored_at, "from": run.restored_from},
        "created_at": run.created_at,
        "updated_at": run.updated_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "checkpoint_at": run.checkpoint_at,
        "waiting_for": waits[0] if waits else None,
        "waiting_for_all": waits,
    }


def waits_for_release(state_format: int, seal_format: int) -> dict[str, Any]:
    """What a run waits for whose checkpoint no live process can resume (engine/resume.py, versioned checkpoints)."""
    return {"kind": "release", "question": resume.waits_for_release(state_format, seal_format),
            "state_format": state_format, "seal_format": seal_format}  # fmt: skip


def waited(waits: Iterable[Waiting]) -> list[dict[str, Any]]:
    """What a waiting run waits for, as the API shows it, oldest first (the run list's own rule)."""
    return [run_list.shown(w) for w in run_list.oldest_first(waits)]


# ----- the timeline -------------------------------------------------------------------------------------


def assemble(run: dict[str, Any], rows: TimelineRows) -> dict[str, Any]:
    """The timeline body: {run, attempts, steps}."""
    by_attempt, by_call = _settlements(rows.resumed)
    return {
        "run": run,
        "attempts": [_attempt(a, by_attempt.get(a.attempt, [])) for a in rows.attempts],
        "steps": _steps(rows, by_call),
    }


def _settlements(
    resumed: list[ResumedRow],
) -> tuple[dict[int, list[dict[str, Any]]], dict[tuple[int, int], dict[str, Any]]]:
    """From each takeover's audit (I8): per attempt, what became of each call left; per call, the last
    takeover that settled it."""
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    by_call: dict[tuple[int, int], dict[str, Any]] = {}
    for row in resumed:
        detail = row.detail
        attempt, step = detail.get("attempt"), detail.get("step")
        if not isinstance(attempt, int) or not isinstance(step, int):
            continue
        for call in detail.get("calls") or []:
            if call.get("route") in _NOT_SETTLED:
                continue
            idx = int(call.get("idx", -1))
            by_attempt.setdefault(attempt, []).append({
                "idx": idx, "step": step, "tool": call.get("tool"), "class": call.get("class"),
                "route": call.get("route"), "happened": call.get("happened"),
            })  # fmt: skip
            by_call[(step, idx)] = {"by_attempt": attempt, "happened": call.get("happened"), "at": row.at}
    return by_attempt, by_call


def _attempt(row: AttemptRow, settled: list[dict[str, Any]]) -> dict[str, Any]:
    taken_after = None
    if row.lost_detected_at is not None and row.first_at is not None:
        taken_after = round(max(0.0, (row.first_at - row.lost_detected_at).total_seconds()), 3)
    return {
        "attempt": row.attempt,
        "process": row.process,
        "started_at": row.started_at,
        "first_at": row.first_at,
        "ended_at": row.ended_at,
        "ended": row.ended,
        "lost_detected_at": row.lost_detected_at,
        "taken_after_s": taken_after,
        "settled": settled,
    }


def _steps(rows: TimelineRows, settled: dict[tuple[int, int], dict[str, Any]]) -> list[dict[str, Any]]:
    notes: dict[int, dict[str, Any]] = {}
    for note in rows.notes:
        step = note.entry.get("body", {}).get("step")
        if isinstance(step, int) and step not in notes:  # a step is noted once; the first note rules
            notes[step] = {**note.entry["body"], "kind": note.entry.get("kind")}
    calls = {(c.step, c.idx): c for c in (_pending(p) for p in rows.pending_calls) if c is not None}
    calls.update({(c.step, c.idx): c for c in rows.calls})  # a landed row is newer than its pending copy
    approvals: dict[tuple[int, int], ApprovalRow] = {}
    for a in rows.approvals:  # oldest first: the last filed for a call is the one that counts
        approvals[(a.step, a.idx)] = a
    return [_step(step, notes[step], calls, approvals, settled) for step in sorted(notes)]


def _step(
    step: int,
    note: dict[str, Any],
    calls: dict[tuple[int, int], CallRow],
    approvals: dict[tuple[int, int], ApprovalRow],
    settled: dict[tuple[int, int], dict[str, Any]],
) -> dict[str, Any]:
    started = _when(note.get("started_at"))
    model_ms = note.get("model_ms")
    shown = [
        _call(step, idx, asked, calls.get((step, idx)), approvals.get((step, idx)), settled.get((step, idx)))
        for idx, asked in enumerate(note.get("calls") or [])
    ]
    if note.get("kind") == "model_answer":
        ended = started + timedelta(milliseconds=model_ms) if started and isinstance(model_ms, int | float) else None
    else:
        ends = [c["outcome_at"] for c in shown]
        done = bool(shown) and all(c["status"] in ("done", "settled") for c in shown)
        ended = max(ends) if done and all(e is not None for e in ends) else None
    return {"step": step, "attempt": note.get("attempt"), "started_at": started, "ended_at": ended,
            "model_ms": model_ms, "calls": shown}  # fmt: skip


def _call(
    step: int,
    idx: int,
    asked: dict[str, Any],
    row: CallRow | None,
    approval: ApprovalRow | None,
    settled: dict[str, Any] | None,
) -> dict[str, Any]:
    tool = row.tool if row else str(asked.get("tool"))
    return {
        "idx": idx,
        "attempt": row.attempt if row else None,  # the attempt that marked or made it, last
        "tool": tool,
        "class": row.cls if row else asked.get("class"),  # as marked: a marked write stays a write (I10)
        "key": (row.sent_key or row.step_key) if row else asked.get("key"),
        "marked_at": row.marked_at if row else None,
        "sent_at": row.sent_at if row else None,
        "outcome_at": row.outcome_at if row else None,
        "outcome": outcome(row, approval, tool),
        "status": row.status if row else "pending",
        "settled": settled,
        "approval_id": approval.id if approval else None,
    }


def outcome(row: CallRow | None, approval: ApprovalRow | None, tool: str) -> str | None:
    """What came of a call: ok, error, unknown (its effect could not be known; never sent again),
    refused; held (for a person's decision), withdrawn (held when its run ended) or asked (a question for
    a person); None while in doubt or not made yet."""
    if row is None:
        if approval is not None and approval.status in ("pending", "withdrawn"):
            return "held" if approval.status == "pending" else "withdrawn"
        return "asked" if tool == REQUEST_INPUT.name else None
    if row.status in ("pending", "in_doubt"):
        return None
    if row.settlement == "refused":
        return "refused"
    result = (row.outcome or {}).get("result") if isinstance(row.outcome, dict) else None
    if isinstance(result, dict):
        said = result.get("outcome")
        if isinstance(said, str) and said.startswith("unknown"):
            return "unknown"
        if "refused" in result:
            return "refused"
        if "error" in result:
            return "error"
    return "ok"


def _pending(data: dict[str, Any]) -> CallRow | None:
    """A finished call (a read, a refusal) still riding in the checkpoint, as the row it lands as."""
    try:
        return CallRow(int(data["step"]), int(data["idx"]), 0, str(data["tool"]), str(data["class"]),
                       data.get("step_key"), None, "done", data.get("outcome"), data.get("how"), None,
                       _when(data.get("sent_at")), _when(data.get("outcome_at")))  # fmt: skip
    except (KeyError, TypeError, ValueError):
        return None


def _when(epoch: Any) -> datetime | None:
    """A time a process took (epoch seconds of its wall clock), as a datetime."""
    return datetime.fromtimestamp(epoch, UTC) if isinstance(epoch, int | float) else None
