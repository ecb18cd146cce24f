"""The process-level statements about runs are fenced by the attempt each run was held or given under
(I3), shown by behaviour on the real Postgres: a clean stop's hand-back, a drain's give-back and the
take-up of a given run each touch a run only under that attempt. With the attempt raised underneath
(committed, or held open in another transaction while the statement runs) each matches nothing and
writes nothing."""

from __future__ import annotations

import asyncio

import psycopg

from tests.support.fence_rig import (
    HOLDER,
    driven_run,
    given_to,
    held_takeover,
    new_run,
    raised,
    take_run,
    written_now,
)
from ticketiq.storage.database import Database
from ticketiq.storage.run_store import RunStore


async def given_run(db: Database, db_url: str) -> str:
    run_id = await new_run(db)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        assert await given_to(conn, run_id) == 1
    return run_id


async def test_a_hand_back_queues_only_a_run_held_under_the_attempt_it_names(db: Database, db_url: str) -> None:
    store = RunStore(db)
    handle = await driven_run(db)
    assert await store.hand_back(HOLDER, [(handle.run_id, 1)]) == [handle.run_id]  # under its attempt: queued
    assert (await written_now(db_url, handle.run_id))["run"][0]["status"] == "queued"
    stale = await driven_run(db)
    # The same process took the run again (its own sweep, after its first driver stalled): attempt 2.
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await take_run(conn, stale.run_id, HOLDER)
    before = await written_now(db_url, stale.run_id)
    assert await store.hand_back(HOLDER, [(stale.run_id, 1)]) == []
    assert await written_now(db_url, stale.run_id) == before


async def test_a_hand_back_waiting_on_a_take_sees_its_attempt_once_it_commits(db: Database, db_url: str) -> None:
    store = RunStore(db)
    handle = await driven_run(db)
    async with held_takeover(db_url, handle.run_id) as takeover:
        taken = await takeover.take(HOLDER)
        handing = asyncio.create_task(store.hand_back(HOLDER, [(handle.run_id, 1)]))
        await takeover.waited_on_by(handing, "the hand-back")
        await takeover.commit()
    assert await handing == []
    assert await written_now(db_url, handle.run_id) == taken


async def test_a_drain_gives_back_only_a_run_given_under_its_current_attempt(db: Database, db_url: str) -> None:
    store = RunStore(db)
    given = await given_run(db, db_url)
    assert await store.drain(HOLDER) == [given]  # given and not taken up: queued again
    assert (await written_now(db_url, given))["lease"] == []
    moved_on = await given_run(db, db_url)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await raised(conn, moved_on)
    before = await written_now(db_url, moved_on)
    assert await store.drain(HOLDER) == []
    assert await written_now(db_url, moved_on) == before


async def test_a_drain_waiting_on_a_raise_sees_it_once_it_commits(db: Database, db_url: str) -> None:
    store = RunStore(db)
    given = await given_run(db, db_url)
    async with held_takeover(db_url, given) as takeover:
        raised_rows = await takeover.raise_attempt()
        draining = asyncio.create_task(store.drain(HOLDER))
        await takeover.waited_on_by(draining, "the drain")
        await takeover.commit()
    assert await draining == []
    assert await written_now(db_url, given) == raised_rows


async def test_a_run_given_under_one_attempt_is_never_taken_up_under_a_later_one(db: Database, db_url: str) -> None:
    store = RunStore(db)
    given = await given_run(db, db_url)
    [up] = await store.take_up(HOLDER, 30.0, [])
    assert (up.run_id, up.attempt) == (given, 1)
    moved_on = await given_run(db, db_url)
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        await raised(conn, moved_on)
    before = await written_now(db_url, moved_on)
    assert await store.take_up(HOLDER, 30.0, []) == []  # it would drive attempt 2, which is not its
    assert await written_now(db_url, moved_on) == before


async def test_a_run_being_taken_meanwhile_is_not_taken_up(db: Database, db_url: str) -> None:
    # The take locks the lease row take_up reads the given attempt from (SKIP LOCKED passes it by).
    store = RunStore(db)
    given = await given_run(db, db_url)
    async with held_takeover(db_url, given) as takeover:
        taken = await takeover.take()
        assert await store.take_up(HOLDER, 30.0, []) == []
        await takeover.commit()
    assert await written_now(db_url, given) == taken
