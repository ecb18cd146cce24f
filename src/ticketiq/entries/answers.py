"""The API's answers about runs and approvals as models, for the OpenAPI document only: the routes answer the
dicts the views build (`views/timeline.py`, `views/run_list.py`, `storage/rows.Approval.shown`) unvalidated,
since a model per answer would cost every request its CPU; a route names its model with `responses=`.

They are the one source of the typed results of `ticketiq.client` (`client/models.py`, written from this
document by `make client-models`), and tests/integration/test_client.py holds each model to a real answer's
keys: a field added to a view and not here fails there.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class WaitingFor(BaseModel):
    """One thing a waiting run waits for: `input` (a question, answered by its question_id), `approval`
    (a held call, decided by its approval_id) or `release` (a checkpoint only a newer release resumes)."""

    kind: str
    question: str | None
    question_id: str | None = None
    approval_id: str | None = None
    tool: str | None = None
    state_format: int | None = None
    seal_format: int | None = None


class Hold(BaseModel):
    at: datetime
    by: str | None
    reason: str | None


class Restored(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    at: datetime
    from_: str | None = Field(alias="from", description="The backup the run was restored from.")


class RunShown(BaseModel):
    """A run as `GET /v1/runs/{id}` answers it (and `POST /v1/runs?wait=S`)."""

    id: str
    agent: str
    status: str = Field(description="queued, running, waiting, succeeded, failed, interrupted or stopped")
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
    stop_requested_at: datetime | None
    held: bool
    hold: Hold | None
    restored: Restored | None
    created_at: datetime
    updated_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    checkpoint_at: datetime
    waiting_for: WaitingFor | None = Field(description="The oldest of `waiting_for_all`.")
    waiting_for_all: list[WaitingFor]


class RunListed(BaseModel):
    """A run as the list shows it."""

    id: str
    agent: str
    status: str
    channel: str
    created_by: str | None
    created_at: datetime
    updated_at: datetime | None
    attempt: int
    losses: int
    steps: int
    held: bool
    waiting_for: WaitingFor | None


class RunPage(BaseModel):
    runs: list[RunListed]
    next_cursor: str | None = Field(description="The next page's `cursor`; null on the last page.")


class SettledCall(BaseModel):
    """What a takeover made of a call its attempt left (I8)."""

    model_config = ConfigDict(populate_by_name=True)
    idx: int
    step: int
    tool: str | None
    class_: str | None = Field(alias="class")
    route: str | None
    happened: str | None


class Attempt(BaseModel):
    attempt: int
    process: str
    started_at: datetime
    first_at: datetime | None
    ended_at: datetime | None
    ended: str | None
    lost_detected_at: datetime | None
    taken_after_s: float | None
    settled: list[SettledCall]


class CallSettlement(BaseModel):
    by_attempt: int
    happened: str | None
    at: datetime


class TimelineCall(BaseModel):
    model_config = ConfigDict(populate_by_name=True)
    idx: int
    attempt: int | None
    tool: str
    class_: str | None = Field(alias="class")
    key: str | None
    marked_at: datetime | None
    sent_at: datetime | None
    outcome_at: datetime | None
    outcome: str | None = Field(description="ok, error, unknown, refused, held, withdrawn, asked; null in doubt")
    status: str
    settled: CallSettlement | None
    approval_id: str | None


class TimelineStep(BaseModel):
    step: int
    attempt: int | None
    started_at: datetime | None
    ended_at: datetime | None
    model_ms: float | None
    calls: list[TimelineCall]


class Timeline(BaseModel):
    run: RunShown
    attempts: list[Attempt]
    steps: list[TimelineStep]


class ApprovalShown(BaseModel):
    id: str
    run_id: str
    step: int
    idx: int
    tool: str
    args: dict[str, Any]
    step_key: str | None
    binding: str
    status: str = Field(description="pending, approved, rejected or withdrawn")
    decided_by: str | None
    reason: str | None
    created_at: datetime
    decided_at: datetime | None
    asked_why: str | None


class Approvals(BaseModel):
    approvals: list[ApprovalShown]


class StopRequested(BaseModel):
    id: str
    stop_requested: bool
    status: str


class Resumed(BaseModel):
    id: str
    resumed: bool
    writes_released: int
    status: str


def documented(status: int, model: type[BaseModel]) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=`: its answer's model, shown in the OpenAPI and never checked at run time."""
    return {status: {"model": model}}
