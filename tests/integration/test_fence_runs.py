"""Every statement an attempt makes about its run is fenced (I3), shown by behaviour on the real Postgres:
under its own attempt each writes; with the attempt raised underneath it (another process's take
committed) it matches nothing, raises Fenced and writes nothing; and with the take held open in another
transaction while it runs, it waits for that take, then sees the new attempt and writes nothing. A
substring of the SQL proves none of this (`attempt = %(attempt)s OR true` has the substring)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests.support.fence_rig import (
    HOLDER,
    TAKER,
    driven_run,
    held_takeover,
    sealed,
    taken_over,
    written,
    written_now,
)
from ticketiq.errors import Fenced
from ticketiq.storage.database import Database
from ticketiq.storage.rows import Checkpoint
from ticketiq.storage.run_store import Flush, RunHandle, RunStore, SealedAnswer

ANSWER = SealedAnswer("done with OPS-1", "answer-seal", "k1", 3600.0)
FINISHED_READ = {"step": 1, "idx": 0, "id": "call_read", "tool": "probe_read", "class": "read", "step_key": None,
                 "args": {"note": "x"}, "gate": "allow", "outcome": {"ok": True}, "how": None}  # fmt: skip
ENTRY = {"kind": "note", "text": "riding on the statement"}


def mark(step: int = 1, idx: int = 0) -> dict[str, Any]:
    return {"step": step, "idx": idx, "provider_call_id": f"call_w{idx}", "tool": "probe_write", "class": "write",
            "step_key": f"tqkey{idx}", "sent_key": f"tqkey{idx}", "args": {"note": "x"}, "budget": 30.0,
            "request_timeout": 10.0, "entries": [ENTRY]}  # fmt: skip


def outcome(result: dict[str, Any], step: int = 1, idx: int = 0) -> dict[str, Any]:
    return {"step": step, "idx": idx, "status": "done", "outcome": {"result": result}, "settlement": None,
            "entries": [ENTRY]}  # fmt: skip


async def nothing(h: RunHandle, db: Database) -> None:
    return None


async def kept_answer(h: RunHandle, db: Database) -> None:
    await h.answered(sealed(1), Flush(), ANSWER, HOLDER)


async def marked(h: RunHandle, db: Database) -> None:
    await h.mark_in_doubt(mark())


async def marked_and_left_open(h: RunHandle, db: Database) -> None:
    await h.mark_in_doubt(mark())
    await h.record_outcome(outcome({"outcome": "uncertain"}))


async def pending_approval(h: RunHandle, db: Database) -> None:
    await h.file_approval(approval())


async def kept_answer_and_a_pending_approval(h: RunHandle, db: Database) -> None:
    # The statements that end a run withdraw what it still held (issue 32): under another's attempt, not.
    await pending_approval(h, db)
    await kept_answer(h, db)


def approval() -> dict[str, Any]:
    return {"id": str(uuid.uuid4()), "step": 1, "idx": 0, "tool": "probe_write", "args": {"note": "x"},
            "step_key": "tqkey0", "binding": "binding-0"}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One statement an attempt makes: what must be there before it, and the call that makes it."""

    act: Callable[[RunHandle], Awaitable[Any]]
    prepare: Callable[[RunHandle, Database], Awaitable[None]] = nothing
    channel: str = "api"


CASES = {
    "runs.write_checkpoint_only": Case(lambda h: h.write_checkpoint(sealed(1), None)),
    "runs.write_checkpoint": Case(lambda h: h.write_checkpoint(sealed(1), Flush([FINISHED_READ], [ENTRY]))),
    "runs.end": Case(lambda h: h.end(sealed(1), Flush([FINISHED_READ], [ENTRY]), "succeeded", ANSWER, None, HOLDER),
                     pending_approval),
    "runs.answered": Case(lambda h: h.answered(sealed(1), Flush([FINISHED_READ], [ENTRY]), ANSWER, HOLDER)),
    "runs.hand_on": Case(lambda h: h.hand_on(ANSWER.text, [ENTRY], HOLDER, {"channel": "copilot"}),
                         kept_answer_and_a_pending_approval, "copilot"),
    "runs.suspend": Case(lambda h: h.suspend(sealed(1), Flush([FINISHED_READ], [ENTRY]), [ENTRY], HOLDER),
                         pending_approval),
    "runs.fail": Case(lambda h: h.fail("the checkpoint failed verification", "agent.run.failed", HOLDER),
                      pending_approval),
    "runs.audit": Case(lambda h: h.audit("agent.run.crash_resumed", HOLDER, {"step": 1})),
    "calls.mark_in_doubt": Case(lambda h: h.mark_in_doubt(mark())),
    "calls.record_outcome": Case(lambda h: h.record_outcome(outcome({"ok": True})), marked),
    "calls.reopen_uncertain": Case(lambda h: h.reopen_uncertain(1, 0, "uncertain"), marked_and_left_open),
    "calls.record_reference": Case(lambda h: h.record_reference(1, 0, "task-7"), marked),
    "approvals.file": Case(lambda h: h.file_approval(approval())),
    "schedules.record_outcome": Case(lambda h: h.record_fire_outcome(ANSWER.text), channel="cron"),
}  # fmt: skip


async def ready(db: Database, case: Case) -> RunHandle:
    if case.channel == "cron":
        run_key = f"cron:{uuid.uuid4()}"
        handle = await driven_run(db, "cron", idempotency_key=run_key)
        await fire_for(db, run_key)
    else:
        handle = await driven_run(db, case.channel)
    await case.prepare(handle, db)
    return handle


async def fire_for(db: Database, run_key: str) -> None:
    schedule = str(uuid.uuid4())
    made = {"id": schedule, "agent": "a", "cron": "* * * * *", "timezone": "UTC", "input": "x",
            "next_fire_at": "2030-01-01T00:00:00Z", "by": "ops"}  # fmt: skip
    await db.fetch_one("schedules.create", made)
    row = await db.fetch_one("schedules.fire", {"schedule_id": schedule, "next_fire_at": "2030-01-01T00:01:00Z",
                                                "fire_at": "2030-01-01T00:00:00Z", "run_key": run_key,
                                                "skipped": False, "reason": None, "holder": "leader"})  # fmt: skip
    assert row is not None


@pytest.mark.parametrize("statement", sorted(CASES))
async def test_under_its_own_attempt_the_statement_writes(db: Database, db_url: str, statement: str) -> None:
    # The control: what the fenced tests show unwritten is written when no one took the run over.
    case = CASES[statement]
    handle = await ready(db, case)
    before = await written_now(db_url, handle.run_id)
    await case.act(handle)
    assert await written_now(db_url, handle.run_id) != before


@pytest.mark.parametrize("statement", sorted(CASES))
async def test_under_a_raised_attempt_the_statement_matches_nothing_and_writes_nothing(
    db: Database, db_url: str, statement: str
) -> None:
    case = CASES[statement]
    handle = await ready(db, case)
    await taken_over(db_url, handle.run_id)
    before = await written_now(db_url, handle.run_id)
    with pytest.raises(Fenced):
        await case.act(handle)
    assert await written_now(db_url, handle.run_id) == before


@pytest.mark.parametrize("statement", sorted(CASES))
async def test_a_statement_waiting_on_a_takeover_sees_its_attempt_once_it_commits(
    db: Database, db_url: str, statement: str
) -> None:
    case = CASES[statement]
    handle = await ready(db, case)
    async with held_takeover(db_url, handle.run_id) as takeover:
        taken = await takeover.take()  # what the take wrote, as its own transaction sees it
        running = asyncio.ensure_future(case.act(handle))
        await takeover.waited_on_by(running, statement)
        await takeover.commit()
    with pytest.raises(Fenced):
        await running
    assert await written_now(db_url, handle.run_id) == taken


async def test_written_sees_what_another_transaction_committed(db: Database, db_url: str) -> None:
    # The rig's own check: `written` is what the comparisons above rest on.
    handle = await driven_run(db)
    async with held_takeover(db_url, handle.run_id) as takeover:
        seen = await written(takeover.conn, handle.run_id)
        assert seen["checkpoint"][0]["attempt"] == 1
        taken = await takeover.take()
        assert taken["checkpoint"][0]["attempt"] == 2
        assert (await written_now(db_url, handle.run_id))["checkpoint"][0]["attempt"] == 1  # not committed yet
        await takeover.commit()
    assert await written_now(db_url, handle.run_id) == taken


async def test_a_decision_landing_while_the_run_suspends_wakes_it(db: Database, db_url: str) -> None:
    """I15: the suspend's statement has read the run's requests (one pending) and not yet committed the
    wait when a person decides. The decision and its wake-up (Engine.decide_approval: decide, then take
    the run) must not fall in between: the wake-up finds the run waiting and takes it, with no sweep.
    runs.lock's FOR UPDATE is what orders them (the decision's note and audit rows take FOR KEY SHARE on
    the run's row). Another transaction's share lock on the checkpoint row holds the suspend inside its
    statement, after its snapshot was taken."""
    handle = await driven_run(db)
    filed = await handle.file_approval(approval())
    store = RunStore(db)

    async def decide_and_wake() -> Checkpoint | None:
        assert await store.decide(filed.id, "approved", "bob", None) is not None
        return await store.acquire(handle.run_id, TAKER, 30.0)

    async with await psycopg.AsyncConnection.connect(db_url) as hold:
        await hold.execute("SELECT 1 FROM checkpoints WHERE run_id = %s FOR SHARE", (handle.run_id,))
        suspending = asyncio.create_task(handle.suspend(sealed(1), Flush(), [ENTRY], HOLDER))
        await waiting_on_locks(db_url, 1, suspending)
        waking = asyncio.create_task(decide_and_wake())
        with contextlib.suppress(AssertionError):  # a decision that does not wait for the suspend ends
            await waiting_on_locks(db_url, 2, waking)
        await hold.rollback()
    assert await suspending is True  # it read the request pending: it waits
    woken = await waking
    assert woken is not None, "the decision's wake-up found the run still running: it waits until the sweep"
    assert (await written_now(db_url, handle.run_id))["run"][0]["status"] == "running"


async def waiting_on_locks(db_url: str, n: int, task: asyncio.Task[Any]) -> None:
    """Until `n` statements of this database wait on row locks; AssertionError if `task` ends first."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as look:
        while True:
            cur = await look.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                     "AND wait_event_type = 'Lock'")  # fmt: skip
            row = await cur.fetchone()
            if row is not None and row[0] >= n:
                return
            if task.done():
                raise AssertionError(f"it ended without waiting: {task.exception()!r}")
            await asyncio.sleep(0.01)
