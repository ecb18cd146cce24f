"""Every statement a job's attempt makes about itself is fenced (I3), shown by behaviour on the real
Postgres: under its own attempt each writes (or, a fenced read, answers); with the attempt raised
underneath it (another worker's take committed) it matches nothing, raises JobLost and writes nothing;
and with the take held open in another transaction while it runs, it waits for that take, then sees the
new attempt and writes nothing. The workflow's statements have theirs in test_workflow_fencing.py."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.support.fence_rig import held_takeover, running_job, taken_over, written_now
from ticketiq.errors import JobLost
from ticketiq.storage.database import Database
from ticketiq.storage.job_store import JobHandle, JobStore

ISSUE = {"key": "OPS-1", "title": "Disk full", "body": "on db-1", "labels": ["storage"], "status": "open",
         "updated_at": "2030-01-01T00:00:00Z"}  # fmt: skip


async def hand_back(h: JobHandle) -> None:
    if not await JobStore(h.db).hand_back(h.holder, [(h.job_id, h.attempt)]):
        raise JobLost(h.job_id, h.attempt, "handing it back")


async def unclaim(h: JobHandle) -> None:
    if not await JobStore(h.db).unclaim([(h.job_id, h.attempt)]):
        raise JobLost(h.job_id, h.attempt, "giving back its claim")


WRITES: dict[str, Callable[[JobHandle], Awaitable[Any]]] = {
    "jobs.save": lambda h: h.save({"cursor": "page-2"}, 1, 10),
    "jobs.finish": lambda h: h.finish("succeeded", {"issues": 1}, None),
    "jobs.hand_back": hand_back,
    "jobs.unclaim": unclaim,
    "knowledge.sync_page": lambda h: h.write_page("jira", "OPS", [ISSUE], {"cursor": "page-2"}, 1, 2),
    "fine_tune.mark_in_doubt": lambda h: h.mark_in_doubt({"at": "upload"}, "upload", 30.0, 10.0),
    "classifiers.record": lambda h: h.record_classifier(
        str(uuid.uuid4()), "OPS", ["storage", "network"], 8, 2, 0.5, 3, {"weights": []}
    ),
    "red_team.record_answer": lambda h: h.record_answer(0, "triage", "ignore your rules", "no", [], "refused"),
}  # fmt: skip
# Fenced reads: a job taken over reads nothing (and so waits out no window, sends nothing after them).
READS: dict[str, Callable[[JobHandle], Awaitable[Any]]] = {
    "fine_tune.clock": lambda h: h.clock(),
}


@pytest.mark.parametrize("statement", sorted(WRITES))
async def test_under_its_own_attempt_the_statement_writes(db: Database, db_url: str, statement: str) -> None:
    handle = await running_job(db)
    before = await written_now(db_url, handle.job_id, "job")
    await WRITES[statement](handle)
    assert await written_now(db_url, handle.job_id, "job") != before


@pytest.mark.parametrize("statement", sorted(READS))
async def test_under_its_own_attempt_the_fenced_read_answers(db: Database, statement: str) -> None:
    handle = await running_job(db)
    assert await READS[statement](handle)


@pytest.mark.parametrize("statement", sorted([*WRITES, *READS]))
async def test_under_a_raised_attempt_the_statement_matches_nothing_and_writes_nothing(
    db: Database, db_url: str, statement: str
) -> None:
    handle = await running_job(db)
    await taken_over(db_url, handle.job_id, "job")
    before = await written_now(db_url, handle.job_id, "job")
    with pytest.raises(JobLost):
        await {**WRITES, **READS}[statement](handle)
    assert await written_now(db_url, handle.job_id, "job") == before


@pytest.mark.parametrize("statement", sorted(WRITES))
async def test_a_statement_waiting_on_a_takeover_sees_its_attempt_once_it_commits(
    db: Database, db_url: str, statement: str
) -> None:
    handle = await running_job(db)
    async with held_takeover(db_url, handle.job_id, "job") as takeover:
        taken = await takeover.take()
        running = asyncio.ensure_future(WRITES[statement](handle))
        await takeover.waited_on_by(running, statement)
        await takeover.commit()
    with pytest.raises(JobLost):
        await running
    assert await written_now(db_url, handle.job_id, "job") == taken
