"""The typed results of `ticketiq.client`: the API's answers, written from its OpenAPI document by
`make client-models` (`python -m ticketiq.cli.client_models --write`). Do not edit: write them again.

TypedDicts over the answers' JSON as it comes: times are ISO 8601 text, ids are UUIDs as text. Each is
written after the ones it names, and its annotations are evaluated (no `from __future__ import annotations`):
so `NotRequired` is seen at run time too, in `__optional_keys__`.
"""

from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "ApprovalShown",
    "Approvals",
    "Attempt",
    "CallSettlement",
    "Hold",
    "InputTaken",
    "JobShown",
    "Progress",
    "Restored",
    "Resumed",
    "RunCreated",
    "RunListed",
    "RunPage",
    "RunShown",
    "SettledCall",
    "StopRequested",
    "Timeline",
    "TimelineCall",
    "TimelineStep",
    "WaitingFor",
]


class RunCreated(TypedDict):
    id: str
    status: str


class WaitingFor(TypedDict):
    """One thing a waiting run waits for: `input` (a question, answered by its question_id), `approval` (a held
    call, decided by its approval_id) or `release` (a checkpoint only a newer release resumes)."""

    kind: str
    question: str | None
    question_id: NotRequired[str | None]
    approval_id: NotRequired[str | None]
    tool: NotRequired[str | None]
    state_format: NotRequired[int | None]
    seal_format: NotRequired[int | None]


class RunListed(TypedDict):
    """A run as the list shows it."""

    id: str
    agent: str
    status: str
    channel: str
    created_by: str | None
    created_at: str
    updated_at: str | None
    attempt: int
    losses: int
    steps: int
    held: bool
    waiting_for: WaitingFor | None


class RunPage(TypedDict):
    runs: list[RunListed]
    next_cursor: str | None


class Hold(TypedDict):
    at: str
    by: str | None
    reason: str | None


Restored = TypedDict(
    "Restored",
    {
        "at": str,
        "from": str | None,
    },
)


class RunShown(TypedDict):
    """A run as `GET /v1/runs/{id}` answers it (and `POST /v1/runs?wait=S`)."""

    id: str
    agent: str
    status: str
    answer: str | None
    error: str | None
    steps: int
    attempt: int
    losses: int
    owner: str
    channel: str
    may_wait: bool
    parent_run_id: str | None
    created_by: str | None
    stop_requested_at: str | None
    held: bool
    hold: Hold | None
    restored: Restored | None
    created_at: str
    updated_at: str | None
    started_at: str | None
    finished_at: str | None
    checkpoint_at: str
    waiting_for: WaitingFor | None
    waiting_for_all: list[WaitingFor]


# What a takeover made of a call its attempt left (I8).
SettledCall = TypedDict(
    "SettledCall",
    {
        "idx": int,
        "step": int,
        "tool": str | None,
        "class": str | None,
        "route": str | None,
        "happened": str | None,
    },
)


class Attempt(TypedDict):
    attempt: int
    process: str
    started_at: str
    first_at: str | None
    ended_at: str | None
    ended: str | None
    lost_detected_at: str | None
    taken_after_s: float | None
    settled: list[SettledCall]


class CallSettlement(TypedDict):
    by_attempt: int
    happened: str | None
    at: str


TimelineCall = TypedDict(
    "TimelineCall",
    {
        "idx": int,
        "attempt": int | None,
        "tool": str,
        "class": str | None,
        "key": str | None,
        "marked_at": str | None,
        "sent_at": str | None,
        "outcome_at": str | None,
        "outcome": str | None,
        "status": str,
        "settled": CallSettlement | None,
        "approval_id": str | None,
    },
)


class TimelineStep(TypedDict):
    step: int
    attempt: int | None
    started_at: str | None
    ended_at: str | None
    model_ms: float | None
    calls: list[TimelineCall]


class Timeline(TypedDict):
    run: RunShown
    attempts: list[Attempt]
    steps: list[TimelineStep]


class InputTaken(TypedDict):
    id: str
    status: str
    question_id: str | None


class StopRequested(TypedDict):
    id: str
    stop_requested: bool
    status: str


class Resumed(TypedDict):
    id: str
    resumed: bool
    writes_released: int
    status: str


class ApprovalShown(TypedDict):
    id: str
    run_id: str
    step: int
    idx: int
    tool: str
    args: dict[str, Any]
    step_key: str | None
    binding: str
    status: str
    decided_by: str | None
    reason: str | None
    created_at: str
    decided_at: str | None
    asked_why: str | None


class Approvals(TypedDict):
    approvals: list[ApprovalShown]


class Progress(TypedDict):
    done: int
    total: int | None
    unit: str


class JobShown(TypedDict):
    id: str
    kind: str
    status: Literal["queued", "running", "succeeded", "failed", "cancelled", "interrupted"]
    resumable: bool
    params: dict[str, Any]
    progress: Progress
    attempts: int
    losses: int
    error: str | None
    result: dict[str, Any] | None
    created_by: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    cancel_requested_at: str | None
    cancel_requested_by: str | None
    restarted_from: str | None
