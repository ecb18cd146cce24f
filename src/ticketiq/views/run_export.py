"""Ended runs written out as JSON Lines, one run a line, in the shapes the API answers (issue 34: export
before purge). A line is {run, timeline, transcript, writes}: `GET /v1/runs/{id}`, `GET
/v1/runs/{id}/timeline`, the whole of `GET /v1/runs/{id}/transcript`, and the write ledger (the
timeline's writes with key, in-doubt mark, send, outcome and settlement).

Streamed: the runs are read a bounded page of ids at a time, in (finished_at, id) order, and one run is
assembled, encoded and written before the next is read, so memory does not grow with the export.
`ticketiq runs export` writes to a file (gzip when its name ends .gz) or to stdout; the retention pass
calls `export_runs_for` before it deletes a batch: the file is whole and durable under its final name
before that returns, and no file is left under it when it raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import os
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from fastapi.encoders import jsonable_encoder

from ticketiq.errors import ExportFailed
from ticketiq.storage.database import Database
from ticketiq.storage.export_store import EndedRun, ExportStore
from ticketiq.storage.run_store import RunStore
from ticketiq.views.runs import RunReads, Transcript

PAGE = 100  # run ids read a statement
TRANSCRIPT_PAGE = 1000  # transcript rows a statement (the API's largest page)
# The write ledger's calls: what changes something at a vendor, marked in doubt before it is sent (I2).
WRITE_CLASSES = frozenset({"write", "keyed_write", "idempotent_write"})
# The ledger's columns of a call, as the timeline shows them (`views/timeline.py`'s `_call`).
LEDGER = ("idx", "attempt", "tool", "class", "key", "marked_at", "sent_at", "outcome_at", "outcome", "status",
          "settled", "approval_id")  # fmt: skip


# ----- decisions ----------------------------------------------------------------------------------------


def write_ledger(timeline: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's writes, step by step, from its timeline: each with its key, in-doubt mark (`marked_at`),
    send, outcome and how a takeover settled it."""
    return [
        {"step": step["step"], **{k: call.get(k) for k in LEDGER}}
        for step in timeline.get("steps") or []
        for call in step.get("calls") or []
        if call.get("class") in WRITE_CLASSES
    ]


def encoded(line: dict[str, Any]) -> bytes:
    """One line, encoded as the API encodes its bodies (FastAPI's encoder, Starlette's JSON)."""
    text = json.dumps(jsonable_encoder(line), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.encode() + b"\n"


def batch_name(first: datetime, last: datetime, unique: str) -> str:
    """A retention batch's file: the range of its runs' ends, and a suffix no other batch has."""
    return f"runs-{_stamp(first)}-{_stamp(last)}-{unique}.jsonl.gz"


def _stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S.%fZ")


# ----- reading ------------------------------------------------------------------------------------------


async def run_line(reads: RunReads, run_id: str) -> dict[str, Any] | None:
    """One run's line; None when it is gone (deleted since its id was read)."""
    run = await reads.shown_run(run_id, None)
    if run is None:
        return None
    timeline = await reads.timeline_of(run)
    transcript = await whole_transcript(reads, run_id)
    if transcript is None:
        return None
    return {"run": run, "timeline": timeline, "transcript": transcript, "writes": write_ledger(timeline)}


async def whole_transcript(reads: RunReads, run_id: str) -> dict[str, Any] | None:
    """The transcript body with every entry: the API's pages, read through to the end."""
    rows, after = [], 0
    while True:
        found = await reads.transcript(run_id, after, TRANSCRIPT_PAGE)
        if found is None:
            return None
        rows += found.rows
        if len(found.rows) < TRANSCRIPT_PAGE:
            return Transcript(rows, found.pending).body(run_id)
        after = found.rows[-1].id


async def ended_runs(db: Database, since: datetime, until: datetime, page: int = PAGE) -> AsyncIterator[dict[str, Any]]:
    """A line for each run that ended in [since, until), in (finished_at, id) order; one page of ids and
    one run held at a time."""
    store, reads = ExportStore(db), RunReads(RunStore(db), db)
    after: EndedRun | None = None
    while True:
        ended = await store.ended_page(since, until, after, page)
        async for line in _lines(reads, ended):
            yield line
        if len(ended) < page:
            return
        after = ended[-1]


async def _lines(reads: RunReads, runs: Iterable[EndedRun]) -> AsyncIterator[dict[str, Any]]:
    for run in runs:
        line = await run_line(reads, run.id)
        if line is not None:
            yield line


# ----- writing ------------------------------------------------------------------------------------------


class Sink(Protocol):
    """Where lines go: a file, a gzip stream, stdout's bytes."""

    def write(self, data: bytes, /) -> int: ...


async def write_lines(lines: AsyncIterator[dict[str, Any]], out: Sink) -> int:
    """Write each line as it comes; how many. Written on the loop, not in a thread: a write stopped
    midway (the pass cancelled) must not go on in a thread while its file is closed and removed; a line
    is a buffered write (a gzip stream compresses it as it goes), the durable part is `write_file`'s."""
    count = 0
    async for line in lines:
        out.write(encoded(line))
        count += 1
    return count


async def write_file(lines: AsyncIterator[dict[str, Any]], path: Path) -> int:
    """Write the lines to `path` (gzip when it ends .gz) whole or not at all: to a temporary name beside
    it, flushed and fsynced, then renamed over `path`, then the directory fsynced, so the name is durable.
    On any failure (a cancellation included) the temporary file is removed and nothing is under `path`
    but what was there before, or (stopped while the rename was made) the whole file."""
    temp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.partial")
    try:
        # Opened on the loop: opened in a thread, a cancellation meanwhile would leave it open.
        with open(temp, "xb") as raw:  # noqa: ASYNC230 (x: never another's file)
            gz = path.name.endswith(".gz")
            with gzip.GzipFile(path.name, "wb", fileobj=raw) if gz else contextlib.nullcontext(raw) as out:
                count = await write_lines(lines, out)
            publish = asyncio.ensure_future(asyncio.to_thread(_publish, raw, temp, path))
            try:
                await asyncio.shield(publish)
            except asyncio.CancelledError:
                await asyncio.wait([publish])  # the thread finishes with the file before it is closed
                raise
    except OSError as exc:
        temp.unlink(missing_ok=True)
        raise ExportFailed(str(path), str(exc)) from exc
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return count


def _publish(raw: IO[bytes], temp: Path, path: Path) -> None:
    """The written file made durable, then given its name, then the name made durable."""
    raw.flush()
    os.fsync(raw.fileno())
    os.replace(temp, path)
    _sync_directory(path.parent)


def _sync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (POSIX: the entry lives in the directory's own data)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def export_to(db: Database, since: datetime, until: datetime, path: Path | None, stdout: IO[bytes]) -> int:
    """`ticketiq runs export`: the runs that ended in [since, until) to `path` (whole or not at all), or
    to `stdout` as they are read; how many."""
    lines = ended_runs(db, since, until)
    if path is None:
        count = await write_lines(lines, stdout)
        await asyncio.to_thread(stdout.flush)
        return count
    return await write_file(lines, path)


# ----- the retention pass's hook ------------------------------------------------------------------------


@dataclass(frozen=True)
class Exported:
    """A retention batch as written: the file (None when none of its runs had ended or were there) and
    the runs in it. Delete exactly `run_ids`: a run left out was not written."""

    path: Path | None
    run_ids: tuple[str, ...]


async def export_runs_for(db: Database, run_ids: Sequence[str], directory: Path) -> Exported:
    """Write the given runs that ended, one line each, to a new `.jsonl.gz` file in `directory` (made if
    missing), named after the range of their ends; it returns once the file is whole and durable under
    that name. Raises (ExportFailed, StorageError) having left no file under a final name: delete then
    nothing, the rows stay for the next pass."""
    ended = await ExportStore(db).ended_of(run_ids)
    if not ended:
        return Exported(None, ())
    written: list[str] = []
    reads = RunReads(RunStore(db), db)

    async def lines() -> AsyncIterator[dict[str, Any]]:
        async for line in _lines(reads, ended):
            yield line
            written.append(str(line["run"]["id"]))

    try:
        await asyncio.to_thread(directory.mkdir, parents=True, exist_ok=True)
    except OSError as exc:
        raise ExportFailed(str(directory), str(exc)) from exc
    path = directory / batch_name(ended[0].finished_at, ended[-1].finished_at, uuid.uuid4().hex[:12])
    await write_file(lines(), path)
    return Exported(path, tuple(written))
