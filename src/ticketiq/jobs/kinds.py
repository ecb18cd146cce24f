"""Background job kinds (issue 10; I13): what a kind declares and what a running job may do.

A job is a row claimed under a lease (`job:<id>`) by one conditional statement, renewed with the
process's other leases and fenced by its attempt (`jobs.attempt`, raised by every claim). A kind is a
module under `ticketiq.jobs` exposing `KIND`; `KINDS` names them, so adding one edits no shared code.

- A resumable kind (source sync, fine-tuning, workflow) whose process dies is queued again for any
  process's worker; its `run` starts again from the state it last saved (`Job.state`).
- Any other kind (classifier training, red team) is failed `interrupted` by the sweep instead, with
  the reason; a person restarts it (`POST /v1/jobs/{id}/restart`), from scratch.

Every statement a job makes about itself goes through `Job`, fenced by its attempt: a job taken over
(or cancelled) raises `JobLost` (or `JobCancelled`) at its next statement and sends nothing more.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ticketiq.errors import RequestError, TicketIQError

if TYPE_CHECKING:
    import httpx

    from ticketiq.engine.engine import Engine
    from ticketiq.settings import Settings
    from ticketiq.storage.database import Database, Row


class JobLost(TicketIQError):
    """A statement about the job matched no row under this attempt: it was taken over or handed back.
    Stop at once, send nothing more."""

    def __init__(self, job_id: str, attempt: int, what: str) -> None:
        super().__init__(f"job {job_id} attempt {attempt} was fenced off while {what}; stopping it")
        self.job_id = job_id
        self.attempt = attempt


class JobCancelled(TicketIQError):
    """A person cancelled the job (`POST /v1/jobs/{id}/cancel`): it ends `cancelled` at this point."""


class JobFailed(TicketIQError):
    """The job cannot succeed: it ends `failed` with this message as its error (not retried)."""


def params_error(field: str, message: str) -> RequestError:
    """A 422 naming the field, as `body.params.<field>` (or `body.kind`)."""
    return RequestError(f"body.params.{field}" if field else "body.params", message)


class Job(Protocol):
    """What a kind's `run` gets: the job's row as claimed and its fenced statements."""

    id: str
    kind: str
    params: dict[str, Any]  # as the kind's `check` returned them
    attempt: int  # this claim's attempt (1 for the first)
    losses: int  # how often a process died holding it
    state: dict[str, Any]  # what the last `save` stored; {} on the first attempt
    created_by: str  # the token name that made it: the run-as principal of what it does
    engine: Engine  # the process's engine: db, settings, registry, catalog, model, http, holder
    db: Database
    settings: Settings
    http: httpx.AsyncClient

    def check(self) -> None:
        """Raise JobLost once the job's lease is lost or its local deadline passed (I3): call before
        every request that changes something outside."""

    async def save(self, state: Mapping[str, Any], done: int | None = None, total: int | None = None) -> None:
        """Checkpoint: store `state` (and progress) in one statement fenced by the attempt. Raises
        JobLost when fenced off, JobCancelled when a person asked to cancel."""

    async def progress(self, done: int, total: int | None = None) -> None:
        """Progress only (done of total), fenced like `save`."""

    async def fenced(self, query: str, params: Mapping[str, Any]) -> list[Row]:
        """Run a kind's own named statement (a `queries/*.sql` name) with `job_id`, `attempt` and
        `holder` added to its parameters. The statement must fence itself on
        `jobs.id = %(job_id)s AND jobs.attempt = %(attempt)s AND jobs.status = 'running'` and return
        at least one row when the fence matched: no row raises JobLost."""
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
