"""`ticketiq jobs watch <id>` and `ticketiq jobs list`: a job's progress over the HTTP API.

`watch` polls `GET /v1/jobs/{id}` at `--url` (default TICKETIQ_URL) with the bearer token `--token`
(default TICKETIQ_TOKEN) and shows a progress bar (done of total, unit) with the job's status, attempts
and losses until the job ends, then a summary of its result (each value, large ones by their size):
exit 0 when it succeeded, 1 when it ended otherwise. A missing or refused token, an unknown job, a
malformed id is one line on stderr and exit 2; an API that cannot be reached, exit 1 (`client.py`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ticketiq.cli.client import Target, async_client, said
from ticketiq.client import AsyncClient
from ticketiq.errors import RequestError

ENDED = frozenset({"succeeded", "failed", "cancelled", "interrupted"})
# A result value longer than this as JSON is summarised by its size (a classifier's whole model, a
# workflow's step outputs): the summary is for a person; GET /v1/jobs/{id} has it whole.
SHOWN_CHARS = 80


def exit_code(status: str) -> int:
    return 0 if status == "succeeded" else 1


def state_line(job: dict[str, Any]) -> str:
    """What the bar says beside the count: status, attempts, losses."""
    return f"{job['status']} · attempt {job['attempts']} · losses {job['losses']}"


def summary(job: dict[str, Any]) -> str:
    """The line printed once the job ended."""
    progress = job["progress"]
    total = "?" if progress["total"] is None else progress["total"]
    line = (f"job {job['id']} ({job['kind']}) {job['status']}: {progress['done']} of {total} {progress['unit']}; "
            f"attempts {job['attempts']}, losses {job['losses']}")  # fmt: skip
    if job.get("error"):
        line += f"\nerror: {job['error']}"
    if job.get("result") is not None:
        line += f"\nresult: {result_summary(job['result'])}"
        if any(len(_json(v)) > SHOWN_CHARS for v in _values(job["result"])):
            line += f"\n(the whole result: GET /v1/jobs/{job['id']})"
    return line


def result_summary(result: Any) -> str:
    """A job's result as `key=value, ...`: small values as JSON, a large one by what it is and its size."""
    if not isinstance(result, dict):
        return _shown(result)
    return ", ".join(f"{key}={_shown(result[key])}" for key in sorted(result)) or "{}"


def _values(result: Any) -> list[Any]:
    return list(result.values()) if isinstance(result, dict) else [result]


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str, ensure_ascii=False)


def _shown(value: Any) -> str:
    text = _json(value)
    if len(text) <= SHOWN_CHARS:
        return text
    size = f"{len(text.encode()) / 1024:.1f} KiB"
    if isinstance(value, dict):
        return f"(an object of {len(value)} fields, {size})"
    if isinstance(value, list):
        return f"({len(value)} items, {size})"
    return f"{text[: SHOWN_CHARS - 20]}... ({size})"


async def watch(target: Target, job_id: str, poll_s: float, console: Console) -> int:
    try:
        uuid.UUID(job_id)
    except ValueError:
        raise RequestError("job_id", f"{job_id!r} is not a job id (a UUID, as POST /v1/jobs answered)") from None
    with said(target):
        async with async_client(target) as api:
            return await _watched(api, job_id, poll_s, console)


async def _watched(api: AsyncClient, job_id: str, poll_s: float, console: Console) -> int:
    job: dict[str, Any] = dict(await api.job(job_id))
    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[unit]}"),
        TextColumn("{task.fields[state]}"), TimeElapsedColumn(),
    )  # fmt: skip
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task(f"{job['kind']} {job_id[:8]}", total=job["progress"]["total"],
                                unit=job["progress"]["unit"], state=state_line(job))  # fmt: skip
        while True:
            progress.update(bar, completed=job["progress"]["done"], total=job["progress"]["total"],
                            state=state_line(job))  # fmt: skip
            if job["status"] in ENDED:
                break
            await asyncio.sleep(poll_s)
            job = dict(await api.job(job_id))
    console.print(summary(job), highlight=False, markup=False, soft_wrap=True)
    return exit_code(str(job["status"]))


async def listed(target: Target, status: str | None, kind: str | None, limit: int) -> int:
    with said(target):
        async with async_client(target) as api:
            found = await api.jobs(status, kind, limit)
    rows = [("ID", "KIND", "STATUS", "PROGRESS", "ATTEMPTS", "LOSSES", "CREATED")]
    for job in found:
        total = "?" if job["progress"]["total"] is None else str(job["progress"]["total"])
        rows.append((job["id"], job["kind"], job["status"], f"{job['progress']['done']}/{total}",
                     str(job["attempts"]), str(job["losses"]), job["created_at"]))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0
