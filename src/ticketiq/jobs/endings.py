"""How a job's run ends, decided from what it returned or raised (pure; the worker writes it).

| what `run` did | the job |
| --- | --- |
| returned a dict | succeeded, with it as the result |
| raised JobCancelled (a person asked, seen at a save) | cancelled |
| raised JobFailed | failed, with its message |
| raised JobLost or LeaseLost (taken over, lease lost or deadline passed) | nothing written (I3) |
| resumable, and raised a retryable StorageError (the database went away) | nothing written, swept * |
| raised anything else, or returned no dict | failed, naming the error (its traceback logged) |

* Its lease lapses; the sweep queues it again, to go on from its last save, counting a loss.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from ticketiq.errors import JobLost, LeaseLost, StorageError
from ticketiq.jobs.kinds import JobCancelled, JobFailed


class Status(enum.StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Ending:
    status: Status
    result: dict[str, Any] | None = None
    error: str | None = None
    unexpected: bool = False  # an error the kind did not mean: its traceback goes to the log


def ending_of(result: object, error: BaseException | None, resumable: bool) -> Ending | None:
    """The job's end, or None when it must write nothing (fenced off, or left to the sweep)."""
    if error is None:
        if not isinstance(result, dict):
            return Ending(Status.FAILED, error=f"the kind's run returned {type(result).__name__}, not a JSON object",
                          unexpected=True)  # fmt: skip
        return Ending(Status.SUCCEEDED, result=result)
    if isinstance(error, JobLost | LeaseLost):
        return None
    if resumable and isinstance(error, StorageError) and error.retryable:
        # A passing outage must not end a job that can go on; the loss it counts bounds a lasting one.
        return None
    if isinstance(error, JobCancelled):
        return Ending(Status.CANCELLED, error=str(error) or "cancelled")
    if isinstance(error, JobFailed):
        return Ending(Status.FAILED, error=str(error) or "failed")
    return Ending(Status.FAILED, error=f"{type(error).__name__}: {error}", unexpected=True)


def free_slots(concurrency: int, running: int, admitted: bool, stopping: bool) -> int:
    """How many queued jobs the worker may claim now: none while the process has no liveness mark of its
    own (coming back under a new identity) or is stopping."""
    if not admitted or stopping:
        return 0
    return max(0, concurrency - running)
