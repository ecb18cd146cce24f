"""What `ticketiq jobs watch` says and how it exits (cli/jobs.py), from the job's JSON."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from ticketiq.cli import jobs as cli_jobs
from ticketiq.cli.client import Target
from ticketiq.errors import ConfigError, RequestError


def job(**changes: Any) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": "6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10", "kind": "source_sync", "status": "running",
        "progress": {"done": 300, "total": 1000, "unit": "issues"}, "attempts": 2, "losses": 1, "error": None,
        "result": None,
    }  # fmt: skip
    return {**shown, **changes}


def test_the_bar_shows_status_attempts_and_losses() -> None:
    assert cli_jobs.state_line(job()) == "running · attempt 2 · losses 1"


def test_the_summary_gives_the_count_the_unit_and_the_error_or_result() -> None:
    ended = job(status="failed", error="Jira answered 401")
    assert cli_jobs.summary(ended) == (
        "job 6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10 (source_sync) failed: 300 of 1000 issues; attempts 2, losses 1\n"
        "error: Jira answered 401"
    )
    done = job(status="succeeded", progress={"done": 5, "total": None, "unit": "steps"}, result={"b": 1, "a": 2})
    assert cli_jobs.summary(done).endswith("5 of ? steps; attempts 2, losses 1\nresult: a=2, b=1")


def test_the_summary_gives_large_values_by_their_size_not_whole() -> None:
    model = {"weights": [[0.125] * 50 for _ in range(20)], "bias": [0.5] * 20, "features": ["w"] * 300}
    trained = job(status="succeeded", result={"accuracy": 0.9, "classes": ["bug", "ops"], "model": model,
                                              "outputs": list(range(100)), "note": "n" * 200})  # fmt: skip
    text = cli_jobs.summary(trained)
    assert 'accuracy=0.9, classes=["bug", "ops"], model=(an object of 3 fields, ' in text
    assert "outputs=(100 items, " in text and "0.125" not in text and "n" * 61 not in text
    assert text.endswith("\n(the whole result: GET /v1/jobs/6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10)")


@pytest.mark.parametrize(("status", "code"), [("succeeded", 0), ("failed", 1), ("cancelled", 1), ("interrupted", 1)])
def test_the_exit_code_is_zero_only_for_a_job_that_succeeded(status: str, code: int) -> None:
    assert cli_jobs.exit_code(status) == code


async def test_a_missing_token_or_a_malformed_id_is_refused_before_any_request() -> None:
    console = Console(record=True)
    # No server listens on this port: the refusal comes before any request is sent.
    nobody = Target("http://127.0.0.1:9", None, "TICKETIQ_URL", "TICKETIQ_TOKEN")
    with pytest.raises(ConfigError, match="TICKETIQ_TOKEN is not set and no --token was given"):
        await cli_jobs.watch(nobody, "6f1c3f0e-2b43-4a55-9a59-0a1d2b7b2f10", 0.1, console)
    with pytest.raises(RequestError, match="not a job id"):
        await cli_jobs.watch(Target("http://127.0.0.1:9", "tiq_x", "--url", "--token"), "OPS-1", 0.1, console)
