"""`ticketiq jobs watch <id>` and `ticketiq jobs list`: a job's progress over the HTTP API.

`watch` polls `GET /v1/jobs/{id}` at TICKETIQ_URL with the bearer token TICKETIQ_TOKEN and shows a
progress bar (done of total, unit) with the job's status, attempts and losses until the job ends: exit
0 when it succeeded, 1 when it ended otherwise. A missing or refused token, an unknown job or an API
that cannot be reached is one line on stderr and exit 2 (a TicketIQError, as every CLI refusal).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ticketiq.errors import ConfigError, NotFound, RequestError, TicketIQError

ENDED = frozenset({"succeeded", "failed", "cancelled", "interrupted"})


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
        line += f"\nresult: {json.dumps(job['result'], sort_keys=True)}"
    return line


def _client(url: str, token: str | None) -> httpx.AsyncClient:
    if not token:
        raise ConfigError("TICKETIQ_TOKEN is not set: export a token an operator holds (`ticketiq tokens create`)")
    return httpx.AsyncClient(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=30)


async def _get(client: httpx.AsyncClient, path: str, params: dict[str, Any] | None = None) -> Any:
    try:
        response = await client.get(path, params=params)
    except httpx.HTTPError as exc:
        raise TicketIQError(f"cannot reach the API at {client.base_url} ({exc}); is TICKETIQ_URL right?") from exc
    if response.status_code in (401, 403):
        raise ConfigError(f"the API refused TICKETIQ_TOKEN ({response.status_code}): {_detail(response)}")
    if response.status_code == 404:
        raise NotFound("job_id", _detail(response))
    if response.status_code == 422:
        raise TicketIQError(f"the API refused the request: {_detail(response)}")
    if response.status_code != 200:
        raise TicketIQError(f"the API answered {response.status_code}: {response.text[:200]}")
    return response.json()


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json()["detail"]
    except (ValueError, KeyError, TypeError):
        return response.text[:200]
    if isinstance(detail, list) and detail and isinstance(detail[0], dict):
        return str(detail[0].get("msg", detail))
    return str(detail)


async def watch(url: str, token: str | None, job_id: str, poll_s: float, console: Console) -> int:
    try:
        uuid.UUID(job_id)
    except ValueError:
        raise RequestError("job_id", f"{job_id!r} is not a job id (a UUID, as POST /v1/jobs answered)") from None
    async with _client(url, token) as client:
        job = await _get(client, f"/v1/jobs/{job_id}")
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
                job = await _get(client, f"/v1/jobs/{job_id}")
        console.print(summary(job), highlight=False, markup=False, soft_wrap=True)
        return exit_code(str(job["status"]))


async def listed(url: str, token: str | None, status: str | None, kind: str | None, limit: int) -> int:
    params = {k: v for k, v in {"status": status, "kind": kind, "limit": limit}.items() if v is not None}
    async with _client(url, token) as client:
        found = await _get(client, "/v1/jobs", params)
    rows = [("ID", "KIND", "STATUS", "PROGRESS", "ATTEMPTS", "LOSSES", "CREATED")]
    for job in found["jobs"]:
        total = "?" if job["progress"]["total"] is None else str(job["progress"]["total"])
        rows.append((job["id"], job["kind"], job["status"], f"{job['progress']['done']}/{total}",
                     str(job["attempts"]), str(job["losses"]), job["created_at"]))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0
