"""One base exception for the package; subclasses carry what happened and what to do."""

from __future__ import annotations


class TicketIQError(Exception):
    """Base of every error the package raises on purpose."""


class ConfigError(TicketIQError):
    """A setting or a file it names is missing or malformed."""


class StorageError(TicketIQError):
    """The database refused or could not be reached; driver errors are translated to this.

    `retryable`: whether the same statement can succeed later (the database was unreachable, busy,
    restarting, or the statement lost a race); False when the database refused it for good."""

    def __init__(self, message: str, sqlstate: str | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.retryable = retryable


class Fenced(TicketIQError):
    """A statement one attempt made about what it holds matched no row (I3): a run (this class) or a job
    (`JobLost`) was taken over, or handed back or swept meanwhile. Stop it now, send nothing more.

    `of` says what was fenced off ("run", "job"), `held_id` its id: one family for runs and jobs, so a
    fence is caught as one thing wherever it comes from."""

    of = "run"

    def __init__(self, held_id: str, attempt: int, what: str) -> None:
        super().__init__(f"{self.of} {held_id} attempt {attempt} was fenced off while {what}; stopping it")
        self.held_id = held_id
        self.attempt = attempt
        self.what = what


class JobLost(Fenced):
    """A statement about the job matched no row under this attempt: it was taken over, handed back or
    swept. Stop at once, send nothing more. (A person's cancel is no fence: the attempt still holds the
    job and writes its end, `cancelled`; see `jobs.kinds.JobCancelled`.)"""

    of = "job"


class LeaseLost(TicketIQError):
    """The process's lease on a run lapsed locally or was not renewed: no further write may be sent."""

    def __init__(self, run_id: str, why: str) -> None:
        super().__init__(f"run {run_id}: lease lost ({why}); no further write is sent")
        self.run_id = run_id
        self.why = why


class SealInvalid(TicketIQError):
    """A checkpoint's seal does not verify: it was altered or its key is unknown."""

    def __init__(self, run_id: str, reason: str) -> None:
        super().__init__(f"checkpoint of run {run_id} failed verification: {reason}")
        self.run_id = run_id
        self.reason = reason


class ModelError(TicketIQError):
    """The model endpoint failed a step; the reason says why."""


class ToolError(TicketIQError):
    """A tool call failed in a way the model should be told about."""


class RequestError(TicketIQError):
    """A request the engine refuses: `field` names what is wrong (`body.agent`, `path.run_id`)."""

    status = 422

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class NotFound(RequestError):
    status = 404


class Conflict(RequestError):
    status = 409


class Forbidden(RequestError):
    status = 403


class ExportFailed(TicketIQError):
    """Ended runs could not be written out (`views/run_export.py`); nothing was left under `path`, so a
    retention pass deletes none of them."""

    def __init__(self, path: str, why: str) -> None:
        super().__init__(f"the export to {path} failed: {why}; nothing was written under that name")
        self.path = path
        self.why = why
