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


def for_call(approvals: Iterable[Approval], bound_by: str) -> Approval | None:
    """The request filed for exactly this call, if any."""
    for approval in approvals:
        if approval.binding == bound_by:
            return approval
    return None
