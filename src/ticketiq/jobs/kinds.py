"""Background job kinds (issue 10; I13): what a kind declares and what a running job may do.

A job is a row claimed under a lease (`job:<id>`) by one conditional statement, renewed with the
process's other leases and fenced by its attempt (`jobs.attempt`, raised by every claim). A kind is a
module under `ticketiq.jobs` exposing `KIND`; `KINDS` names them, so adding one edits no shared code.

- A resumable kind (source sync, fine-tuning, workflow) whose process dies is queued again for any
  process's worker; its `run` starts again from the state it last saved (`Job.state`).
- Any other kind (classifier training, red team) is failed `interrupted` by the sweep instead, with
  the reason; a person restarts it (`POST /v1/jobs/{id}/restart`), from scratch.

Every statement a job makes about itself goes through `Job`'s typed methods (its handle's, in
storage/job_store.py), fenced by its attempt: a job taken over raises `JobLost` (errors.py: a `Fenced`)
at its next statement and sends nothing more; one a person cancelled raises `JobCancelled` where it
looks. A kind gets no database: what it reads, it reads through a store (`Job.knowledge`,
`Job.workflows`), and it names no statement.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ticketiq.errors import RequestError, TicketIQError

if TYPE_CHECKING:
    import httpx

    from ticketiq.engine.engine import Engine
    from ticketiq.settings import Settings
    from ticketiq.storage.job_store import PageWritten, StepWritten
    from ticketiq.storage.knowledge_store import KnowledgeStore
    from ticketiq.storage.workflow_store import StepWrite, WorkflowStore


class JobCancelled(TicketIQError):
    """A person cancelled the job (`POST /v1/jobs/{id}/cancel`): it ends `cancelled` at this point. Not a
    fence (`JobLost` is): the attempt still holds the job, and writes its end."""


class JobFailed(TicketIQError):
    """The job cannot succeed: it ends `failed` with this message as its error (not retried)."""


def params_error(field: str, message: str) -> RequestError:
    """A 422 naming the field, as `body.params.<field>` (or `body.kind`)."""
    return RequestError(f"body.params.{field}" if field else "body.params", message)


class Job(Protocol):
    """What a kind's `run` gets: the job's row as claimed, its fenced statements (each raises JobLost
    when fenced off, after `check`), and the stores it reads."""

    id: str
    kind: str
    params: dict[str, Any]  # as the kind's `check` returned them
    attempt: int  # this claim's attempt (1 for the first)
    losses: int  # how often a process died holding it
    state: dict[str, Any]  # what the last `save` stored; {} on the first attempt
    created_by: str  # the token name that made it: the run-as principal of what it does
    engine: Engine  # the process's engine: settings, registry, catalog, model, http, holder
    settings: Settings
    http: httpx.AsyncClient
    knowledge: KnowledgeStore  # reads of the knowledge table (not about the job: unfenced)
    workflows: WorkflowStore  # a workflow step's gate facts (not about the job: unfenced)

    def check(self) -> None:
        """Raise JobLost once the job's lease is lost or its local deadline passed (I3): call before
        every request that changes something outside."""

    @property
    def lost(self) -> asyncio.Event:
        """Set the moment the job's lease is lost: wakes a wait (I14) at once."""
        ...

    async def save(self, state: Mapping[str, Any], done: int | None = None, total: int | None = None) -> None:
        """Checkpoint: store `state` (and progress) in one statement fenced by the attempt. Raises
        JobLost when fenced off, JobCancelled when a person asked to cancel."""

    async def progress(self, done: int, total: int | None = None) -> None:
        """Progress only (done of total), fenced like `save`."""

    # What the kinds write about their job: each ONE statement fenced by the attempt (I3).

    async def write_page(
        self, source: str, project: str, issues: list[dict[str, Any]], state: Mapping[str, Any], done: int,
        total: int | None,
    ) -> PageWritten:  # fmt: skip
        """A source sync's page of issues with the cursor to the next page and the progress, together."""
        ...

    async def record_answer(
        self, idx: int, agent: str, prompt: str, answer: str, asked_tools: Any, verdict: str
    ) -> None:
        """A red-team run's answer to one prompt."""

    async def record_classifier(
        self, classifier_id: str, project: str | None, classes: list[str], rows_trained: int, rows_held_out: int,
        accuracy: float | None, epochs: int, model: Mapping[str, Any],
    ) -> str:  # fmt: skip
        """A trained classifier, written once by the attempt that trained it; returns its id."""
        ...

    async def mark_in_doubt(
        self, state: Mapping[str, Any], what: str, budget_s: float, request_timeout_s: float
    ) -> dict[str, Any]:
        """I2, I14: the state with request `what` marked in doubt until it can no longer be in flight."""
        ...

    async def clock(self) -> datetime:
        """I14: the database clock, which in-doubt marks are judged by."""
        ...

    async def step_begun(self, step: StepWrite, state: dict[str, Any]) -> StepWritten:
        """A workflow step about to take effect, with the run's state."""
        ...

    async def step_ended(self, step: StepWrite, state: dict[str, Any], done: int) -> StepWritten:
        """A workflow step's outcome, with the state past it and the progress."""
        ...

    async def in_flight_s(self, seq: int, key: str) -> float:
        """I14: seconds until the write marked for this workflow step can no longer be in flight."""
        ...


@dataclass(frozen=True)
class JobKind:
    name: str
    resumable: bool
    description: str
    # Validates and normalises `params` for a new job; raises RequestError naming the field
    # (`params_error`). Pure: no I/O; the engine is given for what is declared (agents, tools, workflows).
    check: Callable[[Mapping[str, Any], Engine], dict[str, Any]]
    # Does the work, resuming from `job.state`; returns the job's result (JSON-able).
    run: Callable[[Job], Awaitable[dict[str, Any]]]
    # How many units `progress` counts (shown by `ticketiq jobs watch`), e.g. "issues", "steps".
    unit: str = "items"
    # Internal kinds (a workflow run) are made by their own route, not by `POST /v1/jobs`.
    internal: bool = False


# name -> module exposing KIND. Each module is imported on first use.
KINDS: dict[str, str] = {
    "source_sync": "ticketiq.jobs.source_sync",
    "fine_tune": "ticketiq.jobs.fine_tune",
    "classifier_training": "ticketiq.jobs.classifier",
    "red_team": "ticketiq.jobs.red_team",
    "workflow": "ticketiq.jobs.workflow",
}


def kind(name: str) -> JobKind:
    """The kind called `name`; a 422 naming `body.kind` for one that does not exist."""
    module = KINDS.get(name)
    if module is None:
        raise RequestError("body.kind", f"unknown job kind {name!r}; one of: {', '.join(sorted(KINDS))}")
    found: JobKind = importlib.import_module(module).KIND
    return found


def unit_of(kind_name: str) -> str:
    """The kind's progress unit; `items` for a kind this version does not know."""
    module = KINDS.get(kind_name)
    if module is None:
        return "items"
    try:
        return kind(kind_name).unit
    except ImportError:
        return "items"
