"""Every statement a workflow run makes about itself is fenced by its job's attempt (I3), on the real
Postgres: the step's mark, the step's end (with its audit) and the in-flight read. Under the attempt
that runs the job each does its work; with the attempt raised underneath, also while the statement
waited on the takeover's row lock, it matches nothing, raises JobLost and writes nothing. And a running
workflow fenced off mid-step sends nothing more."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.crash import eventually
from tests.support.engine import read_rows
from tests.support.standins import Standins
from tests.support.workflow_rig import api, app_process, held_at_vendor, start
from ticketiq.errors import JobLost
from ticketiq.storage.database import Database
from ticketiq.storage.job_store import JobHandle, JobStore, StepWritten
from ticketiq.storage.workflow_store import StepWrite

MARK = StepWrite(1, "comment", "tool", "twkey1", "in_doubt", tool="jira_add_comment", args={"a": 1}, budget_s=5.0)
END = StepWrite(1, "comment", "tool", "twkey1", "done", tool="jira_add_comment", args={"a": 1}, output={"id": "9"},
                settled="found")  # fmt: skip
STATE = {"at": "comment", "executed": 0, "in_doubt": {"key": "twkey1"}}
# Each statement by the query it makes, as the attempt that holds `h` makes it.
STATEMENTS: dict[str, Callable[[JobHandle], Awaitable[Any]]] = {
    "workflows.step_begun": lambda h: h.step_begun(MARK, STATE),
    "workflows.step_ended": lambda h: h.step_ended(END, {"at": None}, 1),
    "workflows.in_flight_for": lambda h: h.in_flight_s(1, "twkey1"),
}


async def running_job(db: Database) -> JobHandle:
    store = JobStore(db)
    made = await store.create(str(uuid.uuid4()), "workflow", {"workflow": "w", "input": {}}, True, "ops")
    claimed = await store.claim("holder-1", 8.0, 1)
    assert [c.id for c in claimed] == [made.id]
    return store.handle(made.id, claimed[0].attempt, "holder-1")


async def written(db_url: str, job_id: str) -> dict[str, Any]:
    job = (await read_rows(db_url, "SELECT state, progress_done, attempt FROM jobs WHERE id = %s", job_id))[0]
    steps = await read_rows(db_url, "SELECT seq, status, key, output, settled FROM workflow_steps WHERE job_id = %s",
                            job_id)  # fmt: skip
    audit = await read_rows(db_url, "SELECT detail FROM audit_log WHERE action = 'workflow.step.settled'")
    return {"job": job, "steps": steps, "audit": audit}


async def raise_attempt(db_url: str, job_id: str) -> None:
    await read_rows(db_url, "UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", job_id)


@pytest.mark.parametrize("query", sorted(STATEMENTS))
async def test_a_statement_under_a_raised_attempt_matches_nothing_and_writes_nothing(
    db: Database, db_url: str, query: str
) -> None:
    handle = await running_job(db)
    await handle.step_begun(MARK, STATE)  # the mark, as the attempt that runs the job
    before = await written(db_url, handle.job_id)
    assert before["steps"] == [{"seq": 1, "status": "in_doubt", "key": "twkey1", "output": None, "settled": None}]
    assert before["job"]["state"] == STATE
    await raise_attempt(db_url, handle.job_id)
    with pytest.raises(JobLost):
        await STATEMENTS[query](handle)
    after = await written(db_url, handle.job_id)
    assert after == {**before, "job": {**before["job"], "attempt": before["job"]["attempt"] + 1}}


async def test_under_its_attempt_the_end_lands_with_its_state_its_progress_and_its_audit(
    db: Database, db_url: str
) -> None:
    handle = await running_job(db)
    await handle.step_begun(MARK, STATE)
    waits = await handle.in_flight_s(1, "twkey1")
    assert 0 < waits <= 5.0  # the mark plus its budget, on the database clock
    written_now = await handle.step_ended(END, {"at": None, "executed": 1}, 1)
    assert written_now == StepWritten(written=1, cancel_requested_by=None)
    after = await written(db_url, handle.job_id)
    assert after["steps"] == [{"seq": 1, "status": "done", "key": "twkey1", "output": {"id": "9"}, "settled": "found"}]
    assert (after["job"]["state"], after["job"]["progress_done"]) == ({"at": None, "executed": 1}, 1)
    assert [(a["detail"]["step"], a["detail"]["happened"]) for a in after["audit"]] == [("comment", "found")]


@pytest.mark.parametrize("query", ["workflows.step_begun", "workflows.step_ended"])
async def test_a_statement_waiting_on_a_takeover_matches_nothing_once_it_commits(
    db: Database, db_url: str, query: str
) -> None:
    handle = await running_job(db)
    before = await written(db_url, handle.job_id)
    async with await psycopg.AsyncConnection.connect(db_url) as takeover:
        async with takeover.transaction():
            await takeover.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (handle.job_id,))
            statement = asyncio.ensure_future(STATEMENTS[query](handle))

            async def waits() -> bool:
                rows = await read_rows(db_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                               "AND query LIKE '%%UPDATE jobs SET state%%'")  # fmt: skip
                return bool(rows)

            await eventually(waits, 30, "the statement waiting on the takeover's lock")
            await takeover.execute("UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", (handle.job_id,))
        with pytest.raises(JobLost):
            await statement
    after = await written(db_url, handle.job_id)
    assert (after["steps"], after["audit"], after["job"]["state"]) == ([], [], before["job"]["state"])


async def test_a_workflow_fenced_off_mid_step_sends_nothing_more(
    db_url: str, tmp_path: Path, standins: Standins
) -> None:
    """The first step's read is held at Jira; meanwhile a takeover locks the job's row, and the end of
    the step waits on it; the takeover raises the attempt and commits. The step's end matches nothing,
    the job stops, and no later step is made: no agent run, no incident, no comment."""
    async with app_process(db_url, tmp_path, standins, lead=False) as h, api(h) as client:
        await standins.fault("jira", "stall", stall_s=1.0, operation="get_issue")
        run_id = await start(client, "OPS-48")
        await held_at_vendor(standins)
        async with await psycopg.AsyncConnection.connect(db_url) as takeover, takeover.transaction():
            await takeover.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (run_id,))

            async def waits() -> bool:
                rows = await read_rows(db_url, "SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                               "AND query LIKE '%%UPDATE jobs SET state%%'")  # fmt: skip
                return bool(rows)

            await eventually(waits, 30, "the step's end waiting on the takeover's lock")
            await takeover.execute("UPDATE jobs SET attempt = attempt + 1 WHERE id = %s", (run_id,))

        async def stopped() -> bool:
            return run_id not in h.process.jobs.slots

        await eventually(stopped, 30, "the fenced workflow stopping")
        job = (await read_rows(db_url, "SELECT status, attempt, state, progress_done FROM jobs WHERE id = %s",
                               run_id))[0]  # fmt: skip
        assert (job["status"], job["attempt"], job["state"], job["progress_done"]) == ("running", 2, {}, 0)
        assert await read_rows(db_url, "SELECT 1 FROM workflow_steps") == []
        assert await read_rows(db_url, "SELECT 1 FROM runs") == []
        assert await standins.writes(vendor="incidentio") == []
        assert await standins.writes(vendor="jira", operation="add_comment") == []
