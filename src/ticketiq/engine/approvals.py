"""Approvals bound to the call they were filed for (I15): pure decisions, no database.

A request is bound to its run, its step and call index, the step key, the tool and the arguments: a
decision counts for exactly that call. A call routed again with other arguments (or another tool at
the same position) is another call and files a request of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from ticketiq.engine.seal import canonical
from ticketiq.storage.rows import Approval


def binding(run_id: str, step: int, idx: int, tool: str, step_key: str | None, args: dict[str, Any]) -> str:
    """The hash an approval is bound by; the same call always gives the same binding."""
    return hashlib.sha256(canonical([run_id, step, idx, step_key, tool, args])).hexdigest()


def restore_binding(run_id: str, step: int, idx: int, tool: str, step_key: str | None, args: dict[str, Any]) -> str:
    """I24: the binding of the request a restored run's write waits on: apart from the approval gate's, so
    that a decision the gate asked for (before the backup, say) never stands for the operator's word."""
    return hashlib.sha256(canonical(["restored", run_id, step, idx, step_key, tool, args])).hexdigest()


def for_call(approvals: Iterable[Approval], bound_by: str) -> Approval | None:
    """The request filed for exactly this call, if any."""
    for approval in approvals:
        if approval.binding == bound_by:
            return approval
    return None


def undecided(approval_id: str, found: Approval, run_status: str | None) -> str:
    """Why a decision on this request matched nothing, as its 409 says it. `run_status`: the run's,
    read only for a request still pending (its run ended, so it is no longer decided)."""
    if found.status == "withdrawn":  # with its run, which ended first (issue 32)
        return f"approval {approval_id} was withdrawn, so nothing was decided: {found.reason}"
    if found.status == "pending":
        # Its run ended under a release whose ending statements did not withdraw (migration 033).
        return f"approval {approval_id} can no longer be decided: its run ended ({run_status})"
    return f"approval {approval_id} was already {found.status}"


def not_approved(found: Approval) -> str:
    """What the model is told of a held call a person did not approve: rejected, or (never for a run still
    driven, whose requests are withdrawn only when it ends) withdrawn."""
    if found.status == "rejected":
        return f"approval rejected by {found.decided_by}"
    return f"approval {found.status}: {found.reason}"
