"""How a job's run ends (jobs/endings.py) and how many jobs a worker claims: pure decisions."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.errors import JobLost, LeaseLost, StorageError
from ticketiq.jobs.endings import Ending, Status, ending_of, free_slots
from ticketiq.jobs.kinds import JobCancelled, JobFailed
from ticketiq.settings import Settings


def test_a_returned_object_is_the_result_of_a_succeeded_job() -> None:
    assert ending_of({"rows": 10}, None, True) == Ending(Status.SUCCEEDED, result={"rows": 10})


def test_a_result_that_is_no_object_fails_the_job_naming_what_it_was() -> None:
    end = ending_of([1, 2], None, True)
    assert end is not None and end.status is Status.FAILED and end.unexpected
    assert end.error == "the kind's run returned list, not a JSON object"


def test_a_fenced_off_job_writes_nothing() -> None:
    # I3: taken over, handed back, or its lease lost: no end is written by this attempt.
    assert ending_of(None, JobLost("j1", 2, "saving its state"), True) is None
    assert ending_of(None, LeaseLost("j1", "local lease deadline passed before renewal"), False) is None


def test_a_cancel_a_failure_and_an_unexpected_error_each_end_the_job_with_their_message() -> None:
    assert ending_of(None, JobCancelled("cancelled by ops at 4 of 8"), True) == Ending(
        Status.CANCELLED, error="cancelled by ops at 4 of 8"
    )
    assert ending_of(None, JobFailed("project OPS does not exist"), True) == Ending(
        Status.FAILED, error="project OPS does not exist"
    )
    crashed = ending_of(None, KeyError("total"), True)
    assert crashed == Ending(Status.FAILED, error="KeyError: 'total'", unexpected=True)


def test_a_database_outage_leaves_a_resumable_job_to_the_sweep_and_fails_any_other() -> None:
    outage = StorageError("database error in jobs.save: no answer within 16 s", None, True)
    assert ending_of(None, outage, resumable=True) is None  # queued again from its last save
    failed = ending_of(None, outage, resumable=False)
    assert failed is not None and failed.status is Status.FAILED
    refused = StorageError("database error in jobs.save: CheckViolation", "23514", False)
    kept = ending_of(None, refused, resumable=True)  # refused for good: trying again cannot help
    assert kept is not None and kept.status is Status.FAILED and kept.error is not None
    assert kept.error.startswith("StorageError: ")


def test_a_worker_claims_no_more_than_its_free_slots_and_none_without_its_mark_or_while_stopping() -> None:
    assert free_slots(2, 0, admitted=True, stopping=False) == 2
    assert free_slots(2, 1, admitted=True, stopping=False) == 1
    assert free_slots(2, 2, admitted=True, stopping=False) == 0
    assert free_slots(2, 0, admitted=False, stopping=False) == 0  # coming back under a new identity
    assert free_slots(2, 0, admitted=True, stopping=True) == 0
    assert free_slots(0, 0, admitted=True, stopping=False) == 0  # TICKETIQ_JOB_CONCURRENCY=0: no worker


@given(st.integers(0, 64), st.integers(0, 64), st.booleans(), st.booleans())
def test_free_slots_never_overfill_the_worker(concurrency: int, running: int, admitted: bool, stopping: bool) -> None:
    free = free_slots(concurrency, running, admitted, stopping)
    assert free >= 0 and running + free <= max(concurrency, running)


def test_the_job_settings_are_read_from_the_environment_with_their_defaults() -> None:
    defaults = Settings.from_env({})
    assert (defaults.job_concurrency, defaults.job_poll_s, defaults.job_max_losses) == (2, 0.5, 3)
    assert (defaults.url, defaults.token) == ("http://127.0.0.1:8080", None)
    env = {"TICKETIQ_JOB_CONCURRENCY": "5", "TICKETIQ_JOB_POLL_S": "0.1", "TICKETIQ_JOB_MAX_LOSSES": "1",
           "TICKETIQ_TOKEN": "tiq_secret"}  # fmt: skip
    read = Settings.from_env(env)
    assert (read.job_concurrency, read.job_poll_s, read.job_max_losses) == (5, 0.1, 1)
    assert "tiq_secret" in read.secrets()  # never logged
