"""Export of ended runs (issue 34 part 5) on the real Postgres: a line is the run, its timeline and its
transcript exactly as the API answers them, and its write ledger; [since, until) bounds it and a run not
ended is never in it; a file is gzip or plain by its name, whole or not there; memory stays one page
however many runs go out; and the retention pass's hook leaves a durable file, or none, under its name."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import os
import resource
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.integration.test_api import api, until
from tests.support.engine import read_rows
from ticketiq.errors import ExportFailed
from ticketiq.storage.database import Database
from ticketiq.storage.queries import QUERIES
from ticketiq.views.run_export import encoded, ended_runs, export_runs_for, export_to, write_lines

# Ended runs made in one statement, each with a checkpoint and one transcript entry of `size` characters,
# the i-th ending at `at` + i * `step`; then `open` runs still going (finished_at NULL).
MAKE = """
WITH made AS (
    INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status, answer,
                      created_by, started_at, finished_at)
    SELECT gen_random_uuid(), 'a', 'check OPS-' || g, 'owner', 'acme', 'api', false, 'c-' || g,
           CASE WHEN g <= %(n)s THEN 'succeeded' ELSE 'running' END, 'answered',
           'caller', %(at)s::timestamptz,
           CASE WHEN g <= %(n)s THEN %(at)s::timestamptz + (g - 1) * %(step)s::interval END
      FROM generate_series(1, %(n)s + %(open)s) g
    RETURNING id, finished_at
), checkpoint AS (
    INSERT INTO checkpoints (run_id, attempt, state, seal, key_id, sealed_attempt, sealed_losses)
    SELECT id, 1, '{}', 'seal', 'k', 1, 0 FROM made
), entry AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT id, 'statement', jsonb_build_object('text', repeat('x', %(size)s)) FROM made
)
SELECT id::text AS id FROM made WHERE finished_at IS NOT NULL ORDER BY finished_at, id
"""


async def make_runs(
    db_url: str, n: int, at: datetime, step: timedelta = timedelta(seconds=1), *, open_runs: int = 0, size: int = 10
) -> list[str]:
    """`n` ended runs (their ids in (finished_at, id) order) and `open_runs` running ones."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute(MAKE, {"n": n, "at": at, "step": step, "open": open_runs, "size": size})
        return [str(r[0]) for r in await cur.fetchall()]


def names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


async def db_now(db_url: str) -> datetime:
    now: datetime = (await read_rows(db_url, "SELECT now() AS now"))[0]["now"]
    return now


async def exported(db: Database, since: datetime, until: datetime, page: int = 100) -> list[dict[str, Any]]:
    return [json.loads(encoded(line)) async for line in ended_runs(db, since, until, page)]


# ----- the shape is the API's ---------------------------------------------------------------------------


async def test_each_line_is_the_run_its_timeline_and_transcript_as_the_api_answers_them(
    db_url: str, tmp_path: Path
) -> None:
    async with api(db_url, tmp_path) as (client, h):
        since = await db_now(db_url)
        made = [(await client.post("/v1/runs", json={"agent": "a", "input": f"check OPS-{i}"})).json()["id"]
                for i in (41, 42)]  # fmt: skip
        for run_id in made:
            await until(client, run_id, "succeeded")
        # A held run that ended is exported too: a hold keeps it from the purge, not from an export.
        assert (await client.post(f"/v1/runs/{made[1]}/hold", json={"reason": "kept"})).status_code == 200
        lines = await exported(h.process.db, since, await db_now(db_url) + timedelta(seconds=1))

        assert sorted(line["run"]["id"] for line in lines) == sorted(made)
        ends = [(line["run"]["finished_at"], line["run"]["id"]) for line in lines]
        assert ends == sorted(ends)
        for line in lines:
            run_id = line["run"]["id"]
            assert set(line) == {"run", "timeline", "transcript", "writes"}
            assert line["run"] == (await client.get(f"/v1/runs/{run_id}")).json()
            assert line["timeline"] == (await client.get(f"/v1/runs/{run_id}/timeline")).json()
            assert line["transcript"] == (await client.get(f"/v1/runs/{run_id}/transcript",
                                                           params={"limit": 1000})).json()  # fmt: skip
            # The ledger: the one write each run made (probe_write), with its key, mark, send and outcome.
            [write] = line["writes"]
            assert write["tool"] == "probe_write" and write["class"] == "write" and write["outcome"] == "ok"
            assert write["key"] and write["marked_at"] and write["sent_at"] and write["outcome_at"]
            [step] = [s for s in line["timeline"]["steps"] if s["step"] == write["step"]]
            shown = step["calls"][write["idx"]]
            assert {k: shown[k] for k in write if k != "step"} == {k: v for k, v in write.items() if k != "step"}
        assert next(line for line in lines if line["run"]["id"] == made[1])["run"]["held"] is True


async def test_a_transcript_longer_than_the_api_s_page_is_exported_whole(db: Database, db_url: str) -> None:
    at = await db_now(db_url) - timedelta(hours=1)
    [run_id] = await make_runs(db_url, 1, at)
    entries = ("INSERT INTO transcripts (run_id, kind, body) SELECT %s, 'statement', "
               "jsonb_build_object('text', 'entry ' || g) FROM generate_series(1, 2500) g")  # fmt: skip
    await read_rows(db_url, entries, run_id)
    [line] = await exported(db, at, at + timedelta(seconds=1))
    texts = [e["text"] for e in line["transcript"]["entries"]]
    assert len(texts) == 2501 and texts[1:] == [f"entry {g}" for g in range(1, 2501)]
    ids = [e["id"] for e in line["transcript"]["entries"]]
    assert ids == sorted(ids) and len(set(ids)) == 2501


# ----- which runs ---------------------------------------------------------------------------------------


async def test_since_is_in_until_is_out_ties_page_by_id_and_a_run_not_ended_is_never_exported(
    db: Database, db_url: str
) -> None:
    at = (await db_now(db_url)) - timedelta(days=2)
    early = await make_runs(db_url, 3, at - timedelta(hours=1), timedelta(minutes=1), open_runs=4)
    # Five ending at the same instant: a page boundary falls among them, and the id orders them.
    tied = await make_runs(db_url, 5, at, timedelta(0))
    late = await make_runs(db_url, 3, at + timedelta(hours=1), timedelta(minutes=1))
    await read_rows(db_url, "UPDATE runs SET held_at = now(), held_by = 'ops' WHERE id = %s", tied[2])

    got = [line["run"]["id"] for line in await exported(db, at, at + timedelta(hours=1), page=2)]
    assert got == tied  # since inclusive (all five end at `at`), until exclusive (late[0] ends at it)
    everything = [line["run"]["id"] for line in await exported(db, at - timedelta(days=1), at + timedelta(days=1), 3)]
    assert everything == early + tied + late  # the 4 running runs are not there
    assert await exported(db, at + timedelta(days=1), at + timedelta(days=2)) == []


async def test_the_export_pages_through_the_partial_indexes_of_the_ended_runs(db: Database, db_url: str) -> None:
    # Not the table scan: each half of a page reads its own index (the planner sees enough rows to choose).
    at = await db_now(db_url) - timedelta(days=1)
    await make_runs(db_url, 3000, at, timedelta(milliseconds=10), open_runs=3000)
    await read_rows(db_url, "ANALYZE runs")
    plan = await explained(db_url, QUERIES["export.ended_page"], at)
    assert "runs_purgeable" in plan and "runs_held_created" in plan and "Seq Scan" not in plan


async def explained(db_url: str, sql: str, at: datetime) -> str:
    params = {"since": at, "until": at + timedelta(hours=1), "after_at": at + timedelta(seconds=5),
              "after_id": "00000000-0000-0000-0000-000000000000", "limit": 100}  # fmt: skip
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        cur = await conn.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        row = await cur.fetchone()
        assert row is not None
        return json.dumps(row[0])


# ----- where they go ------------------------------------------------------------------------------------


async def test_a_file_is_gzip_when_its_name_ends_gz_else_plain_and_either_is_whole(
    db: Database, db_url: str, tmp_path: Path
) -> None:
    at = await db_now(db_url) - timedelta(hours=3)
    made = await make_runs(db_url, 7, at, open_runs=2)
    zipped, plain = tmp_path / "runs.jsonl.gz", tmp_path / "runs.jsonl"
    assert await export_to(db, at, at + timedelta(hours=1), zipped, io.BytesIO()) == 7
    assert await export_to(db, at, at + timedelta(hours=1), plain, io.BytesIO()) == 7
    with gzip.open(zipped, "rt", encoding="utf-8") as unzipped:
        assert [json.loads(text)["run"]["id"] for text in unzipped] == made
    assert [json.loads(text)["run"]["id"] for text in plain.read_text().splitlines()] == made
    assert plain.read_bytes()[:2] != b"\x1f\x8b"
    assert names(tmp_path) == ["runs.jsonl", "runs.jsonl.gz"]  # no temporary left


async def test_without_a_file_the_lines_go_to_stdout_as_they_are_read(db: Database, db_url: str) -> None:
    at = await db_now(db_url) - timedelta(hours=3)
    made = await make_runs(db_url, 4, at)
    out = io.BytesIO()
    assert await export_to(db, at, at + timedelta(hours=1), None, out) == 4
    assert [json.loads(text)["run"]["id"] for text in out.getvalue().splitlines()] == made


# ----- memory -------------------------------------------------------------------------------------------


class Counted:
    """A sink that keeps nothing: how many bytes went through it."""

    def __init__(self) -> None:
        self.bytes = 0

    def write(self, data: bytes, /) -> int:
        self.bytes += len(data)
        return len(data)


@pytest.mark.long
async def test_many_runs_go_out_in_the_memory_of_one_page(db: Database, db_url: str) -> None:
    import tracemalloc

    at = await db_now(db_url) - timedelta(days=1)
    await make_runs(db_url, 2000, at, timedelta(milliseconds=3), open_runs=50, size=4000)
    sink = Counted()
    # Once untraced, so what a first statement costs once (its plan, the driver's caches) is not counted.
    assert await write_lines(ended_runs(db, at, at + timedelta(milliseconds=30), page=100), Counted()) == 10
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        count = await write_lines(ended_runs(db, at, at + timedelta(hours=1), page=100), sink)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert count == 2000
    # Each line holds its 4,000-character entry (and the run twice): the export is 2000 of them. Held
    # all at once, the peak would pass the output's size; a page of ids and one run is a small part of it.
    assert sink.bytes > 2000 * 4000
    assert peak < sink.bytes / 10, (peak, sink.bytes)


# ----- the retention pass's hook ------------------------------------------------------------------------


async def test_the_hook_writes_the_batch_that_ended_to_a_durable_file_named_by_its_range(
    db: Database, db_url: str, tmp_path: Path
) -> None:
    at = await db_now(db_url) - timedelta(days=40)
    made = await make_runs(db_url, 5, at, timedelta(minutes=1))
    going = await read_rows(db_url, "SELECT id::text AS id FROM runs WHERE finished_at IS NULL")
    exports = tmp_path / "exports" / "2026"  # made when missing
    batch = [made[3], made[0], made[4], "00000000-0000-0000-0000-000000000001"]
    done = await export_runs_for(db, batch, exports)

    assert done.run_ids == (made[0], made[3], made[4])  # in the order they ended; the missing one left out
    assert done.path is not None and done.path.parent == exports
    stamp = at.strftime("%Y%m%dT%H%M")
    assert done.path.name.startswith(f"runs-{stamp}") and done.path.name.endswith(".jsonl.gz")
    assert names(exports) == [done.path.name]  # renamed: no temporary left
    with gzip.open(done.path, "rt", encoding="utf-8") as written:
        lines = [json.loads(text) for text in written]
    assert [line["run"]["id"] for line in lines] == list(done.run_ids)
    assert all(set(line) == {"run", "timeline", "transcript", "writes"} for line in lines)

    again = await export_runs_for(db, [made[0]], exports)  # a second batch never overwrites the first
    assert again.path != done.path and len(names(exports)) == 2
    assert going == [] or (await export_runs_for(db, [going[0]["id"]], exports)).path is None
    assert (await export_runs_for(db, [], exports)).path is None


@contextlib.contextmanager
def files_at_most(size: int) -> Iterator[None]:
    """This process may write no file past `size` bytes (a full disk, as the writer sees it: EFBIG)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    kept = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, kept)


async def test_a_write_that_fails_midway_raises_and_leaves_no_file(db: Database, db_url: str, tmp_path: Path) -> None:
    at = await db_now(db_url) - timedelta(days=40)
    made = await make_runs(db_url, 200, at)
    with files_at_most(2048), pytest.raises(ExportFailed) as failed:
        await export_runs_for(db, made, tmp_path)
    assert "File too large" in str(failed.value) and failed.value.path.startswith(str(tmp_path))
    assert names(tmp_path) == []
    # The directory cannot be made: refused before anything is read or written.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(ExportFailed):
        await export_runs_for(db, made, blocker / "exports")
    assert names(tmp_path) == ["a-file"]


async def test_a_pass_stopped_while_it_writes_leaves_no_file(db: Database, db_url: str, tmp_path: Path) -> None:
    at = await db_now(db_url) - timedelta(days=40)
    made = await make_runs(db_url, 400, at, size=200)
    task = asyncio.create_task(export_runs_for(db, made, tmp_path))
    for _ in range(2000):  # until the temporary file is there
        partial = [name for name in names(tmp_path) if name.endswith(".partial")]
        if partial or task.done():
            break
        await asyncio.sleep(0.005)
    assert not task.done() and partial
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert names(tmp_path) == []
