"""The run's attempts and its calls' times (migration 023), written by the statements that take, end,
suspend and hand back a run and mark and record a call, on the real Postgres: each closes the attempt it
names, how it ended; a take closes the attempt it finds open as lost, stalled or handed back; and under
a raised attempt nothing is written, the new attempt left as its take made it (I3)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

from tests.support.fence_rig import (
    HOLDER,
    driven_run,
    given_to,
    new_run,
    sealed,
    take_run,
    taken_over,
    written_now,
)
from ticketiq.errors import Fenced
from ticketiq.storage.database import Database
from ticketiq.storage.queries import QUERIES
from ticketiq.storage.run_store import Flush, RunStore

ENTRY_BODY = {"kind": "note", "text": "riding on the statement"}
MARK = {"step": 1, "idx": 0, "provider_call_id": "call_w0", "tool": "probe_write", "class": "write",
        "step_key": "tqkey0", "sent_key": "tqkey0", "args": {"note": "x"}, "budget": 30.0, "request_timeout": 10.0,
        "entries": [ENTRY_BODY]}  # fmt: skip


async def attempts(db_url: str, run_id: str) -> list[dict[str, Any]]:
    return list((await written_now(db_url, run_id))["attempts"])


async def test_a_take_opens_its_attempt_and_ends_the_one_it_found_open_lost(db: Database, db_url: str) -> None:
    handle = await driven_run(db)  # HOLDER is no live process: its lease's holder is gone
    [first] = await attempts(db_url, handle.run_id)
    assert (first["process"], first["ended"], first["lost_detected_at"]) == (HOLDER, None, None)
    assert await taken_over(db_url, handle.run_id) == 2
    first, second = await attempts(db_url, handle.run_id)
    assert first["ended"] == "lost" and first["ended_at"] == second["lost_detected_at"] == second["started_at"]
    assert (second["process"], second["ended"], second["first_at"]) == ("process-2", None, None)


async def test_a_lapsed_lease_whose_process_lives_ends_its_attempt_stalled(db: Database, db_url: str) -> None:
    live = f"live-{uuid.uuid4().hex[:8]}"
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as mark:
        # A registered process holds its liveness mark on this connection while the take runs.
        born = {"id": live, "pid": 1, "host": "h", "version": "0", "commit": "c", "state_format": 1, "seal_format": 2}
        await mark.execute(QUERIES["leader.register"], born)
        store = RunStore(db)
        run_id = await new_run(db)
        assert await store.acquire(run_id, live, 30.0) is not None
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
            assert await take_run(conn, run_id) == 2
    first, _ = await attempts(db_url, run_id)
    assert (first["process"], first["ended"]) == (live, "stalled")


async def test_a_take_that_counts_no_loss_ends_an_open_attempt_handed_back(db: Database, db_url: str) -> None:
    handle = await driven_run(db)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await conn.execute("SELECT * FROM take_run(%s, 'process-2', 30, false)", (handle.run_id,))
    first, second = await attempts(db_url, handle.run_id)
    assert first["ended"] == "handed_back" and second["lost_detected_at"] is None


async def test_a_hand_back_ends_the_attempt_it_names_and_a_stale_one_ends_none(db: Database, db_url: str) -> None:
    store = RunStore(db)
    handle = await driven_run(db)
    assert await store.hand_back(HOLDER, [(handle.run_id, 1)]) == [handle.run_id]
    assert [a["ended"] for a in await attempts(db_url, handle.run_id)] == ["handed_back"]
    stale = await driven_run(db)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await take_run(conn, stale.run_id, HOLDER)
    assert await store.hand_back(HOLDER, [(stale.run_id, 1)]) == []
    assert [a["ended"] for a in await attempts(db_url, stale.run_id)] == ["lost", None]  # attempt 2 still runs


async def test_a_drain_ends_a_given_attempt_it_gives_back(db: Database, db_url: str) -> None:
    run_id = await new_run(db)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        assert await given_to(conn, run_id) == 1
    assert await RunStore(db).drain(HOLDER) == [run_id]
    assert [(a["process"], a["ended"]) for a in await attempts(db_url, run_id)] == [(HOLDER, "handed_back")]


@pytest.mark.parametrize("how", ["end", "fail", "suspend"])
async def test_a_run_s_end_closes_its_own_attempt_and_under_a_raised_one_leaves_the_new_one_open(
    db: Database, db_url: str, how: str
) -> None:
    async def act(h: Any) -> None:
        if how == "end":
            await h.end(sealed(1), Flush(), "succeeded", None, None, HOLDER)
        elif how == "fail":
            await h.fail("the checkpoint failed verification", "agent.run.failed", HOLDER)
        else:
            await h.file_approval({"id": str(uuid.uuid4()), "step": 1, "idx": 0, "tool": "probe_write",
                                   "args": {}, "step_key": "k", "binding": f"b-{uuid.uuid4()}"})  # fmt: skip
            assert await h.suspend(sealed(1), Flush(), [ENTRY_BODY], HOLDER) is True

    own = await driven_run(db)
    await own.write_checkpoint(sealed(1), Flush([], [ENTRY_BODY]), opening=True)  # its first checkpoint
    [before] = await attempts(db_url, own.run_id)
    await act(own)
    [after] = await attempts(db_url, own.run_id)
    assert after["ended"] == ("waiting" if how == "suspend" else "finished")
    assert after["first_at"] == before["first_at"] is not None and after["ended_at"] >= after["first_at"]

    lost = await driven_run(db)
    await taken_over(db_url, lost.run_id)
    opened = await attempts(db_url, lost.run_id)
    with pytest.raises(Fenced):
        await act(lost)
    assert await attempts(db_url, lost.run_id) == opened
    assert opened[1]["ended"] is None and opened[1]["first_at"] is None


async def test_a_takeover_s_first_statement_is_when_the_run_went_on(db: Database, db_url: str) -> None:
    handle = await driven_run(db)
    await taken_over(db_url, handle.run_id)
    taker = RunStore(db).bound(handle.run_id, 2)
    await taker.audit("agent.run.crash_resumed", "process-2", {"step": 0, "attempt": 2, "calls": []})
    _, second = await attempts(db_url, handle.run_id)
    assert second["first_at"] is not None and second["first_at"] >= second["lost_detected_at"]
    await taker.write_checkpoint(sealed(1), Flush([], [ENTRY_BODY]), opening=True)
    assert (await attempts(db_url, handle.run_id))[1]["first_at"] == second["first_at"]  # the first, kept
    later = await driven_run(db)
    await later.write_checkpoint(sealed(1), Flush([], [ENTRY_BODY]))  # not its first: nothing recorded
    assert (await attempts(db_url, later.run_id))[0]["first_at"] is None


def outcome(result: Any, status: str = "done", **times: float) -> dict[str, Any]:
    return {"step": 1, "idx": 0, "status": status, "outcome": {"result": result}, "settlement": "sent",
            "entries": [], **times}  # fmt: skip


async def call_row(db_url: str, run_id: str) -> dict[str, Any]:
    [row] = (await written_now(db_url, run_id))["calls"]
    return dict(row)


async def test_a_call_s_mark_send_and_outcome_times_and_a_resend_s_own(db: Database, db_url: str) -> None:
    handle = await driven_run(db)
    await handle.mark_in_doubt(MARK)
    marked = await call_row(db_url, handle.run_id)
    assert marked["marked_at"] is not None and (marked["sent_at"], marked["outcome_at"]) == (None, None)
    sent = time.time()
    await handle.record_outcome(outcome({"outcome": "uncertain"}, sent_at=sent, outcome_at=sent + 0.25))
    recorded = await call_row(db_url, handle.run_id)
    assert recorded["sent_at"].timestamp() == pytest.approx(sent, abs=1e-5)
    assert recorded["outcome_at"].timestamp() == pytest.approx(sent + 0.25, abs=1e-5)
    # Its effect left open: back in doubt, the send's time kept; a settlement that sends nothing keeps it too.
    await handle.reopen_uncertain(1, 0, "uncertain")
    await handle.record_outcome(outcome({"landed": True}, "settled", outcome_at=sent + 1))
    settled = await call_row(db_url, handle.run_id)
    assert settled["sent_at"] == recorded["sent_at"] and settled["marked_at"] == marked["marked_at"]
    assert settled["outcome_at"].timestamp() == pytest.approx(sent + 1, abs=1e-5)
    # Sent again: marked again, the earlier send's times cleared until the resend records its own.
    again = await driven_run(db)
    await again.mark_in_doubt(MARK)
    await again.record_outcome(outcome({"outcome": "uncertain"}, sent_at=sent, outcome_at=sent + 0.25))
    await again.reopen_uncertain(1, 0, "uncertain")
    await again.mark_in_doubt(MARK)
    remarked = await call_row(db_url, again.run_id)
    assert (remarked["sent_at"], remarked["outcome_at"]) == (None, None) and remarked["marked_at"] is not None
