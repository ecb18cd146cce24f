"""A process whose liveness mark went with its connection (a failover or a restart takes every session's
locks) takes it again under the same identity, unless the leader found it dead first; and a leader
whose database just came back judges no process dead until every process had the time to take its
mark again (TICKETIQ_DB_BACK_GRACE_S). Real Postgres, real sockets: the mark's connection is ended by
the server (pg_terminate_backend), and a TCP proxy holds a process's way back to its mark."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from tests.support.engine import engine_under_test, kill_liveness, mark_session, read_rows
from tests.support.tcp_proxy import TcpProxy
from ticketiq.errors import StorageError
from ticketiq.storage import database, leader_store
from ticketiq.storage.database import DEFAULT_LIMITS

SCRIPTS: dict[str, list[dict[str, Any]]] = {"r": [{"text": "done"}]}
AGENTS = {"r": {"tools": ["probe_read"]}}


def folder(tmp: Path, name: str) -> Path:
    made = tmp / name
    made.mkdir()
    return made


async def until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        await asyncio.sleep(0.02)


async def released(db_url: str, holder: str) -> None:
    """The mark's old session gone on the server too: the client closed it, and the server ends the backend
    (and frees its advisory lock) a moment later, longer on a busy machine; a retake before that finds
    the lock held and rightly gives the identity up."""
    deadline = time.monotonic() + 30
    while (await read_rows(db_url, "SELECT process_alive(%s) AS alive", holder))[0]["alive"]:
        assert time.monotonic() < deadline, "the released mark's session never ended on the server"
        await asyncio.sleep(0.02)


async def ended_how(db_url: str, holder: str) -> str | None:
    rows = await read_rows(db_url, "SELECT ended_how FROM processes WHERE id = %s", holder)
    return rows[0]["ended_how"] if rows else "no row"


async def test_a_process_found_dead_before_it_took_its_mark_again_comes_back_under_a_new_identity(
    db_url: str, tmp_path: Path, proxy: TcpProxy
) -> None:
    async with (
        engine_under_test(db_url, folder(tmp_path, "a"), SCRIPTS, AGENTS, lead=False, db_connect_timeout_s=1.0) as a,
        engine_under_test(db_url, folder(tmp_path, "b"), SCRIPTS, AGENTS, lead=True, liveness_poll_s=0.1) as b,
    ):
        old = a.engine.deps.holder
        a.process.liveness.url = proxy.url(db_url)  # its way back to its mark goes through the proxy
        proxy.pause()
        await kill_liveness(db_url, old)
        await until(lambda: not a.engine.admitted.is_set(), "loss of the mark")
        # The leader saw no outage of its own: a free mark is a death, judged at once.
        deadline = time.monotonic() + 30
        while await ended_how(db_url, old) != "died":
            assert time.monotonic() < deadline, "the leader never found the process dead"
            await asyncio.sleep(0.05)
        proxy.resume()
        await until(a.engine.admitted.is_set, "the process admitting runs again")
        assert a.engine.deps.holder != old  # the identity found dead is never taken again (I4)
        alive = await read_rows(db_url, "SELECT process_alive(%s) AS alive", a.engine.deps.holder)
        assert alive == [{"alive": True}]
        assert b.engine.deps.holder != a.engine.deps.holder


async def test_the_retake_matches_nothing_when_a_claim_ended_the_process_under_it(db_url: str, tmp_path: Path) -> None:
    # claim_dead and the retake update the same row: the one that waits re-checks against the other's.
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        holder = h.engine.deps.holder
        await h.process.liveness.release()  # its mark is free; the process row still says it lives
        await released(db_url, holder)
        async with await psycopg.AsyncConnection.connect(db_url) as claim:
            # The claim's update, not yet committed: the process is being ended as dead.
            await claim.execute("UPDATE processes SET ended_at = now(), ended_how = 'died' WHERE id = %s", (holder,))
            conn = await database.connect(db_url, DEFAULT_LIMITS)
            try:
                retake = asyncio.create_task(leader_store.retake(conn, holder, within_s=10))
                await asyncio.sleep(0.3)
                assert not retake.done()  # it waits on the row the claim holds
                await claim.commit()
                assert await retake is None  # ended meanwhile: the identity cannot be kept
            finally:
                await conn.close()
        assert await read_rows(db_url, "SELECT process_alive(%s) AS alive", holder) == [{"alive": False}]


async def test_the_retake_keeps_the_identity_and_gives_its_leases_up_to_the_sweep(db_url: str, tmp_path: Path) -> None:
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        holder = h.engine.deps.holder
        await read_rows(db_url, "INSERT INTO leases (name, holder, expires_at) VALUES ('checkpoint:x', %s, "
                        "now() + interval '1 hour')", holder)  # fmt: skip
        await h.process.liveness.release()
        await released(db_url, holder)
        conn = await database.connect(db_url, DEFAULT_LIMITS)
        try:
            assert await leader_store.retake(conn, holder, within_s=10) is not None
            assert await read_rows(db_url, "SELECT process_alive(%s) AS alive", holder) == [{"alive": True}]
            lease = await read_rows(
                db_url, "SELECT expires_at < now() AS lapsed FROM leases WHERE name = 'checkpoint:x'"
            )
            assert lease == [{"lapsed": True}]
            # Held now by this session: a second retake (another session) cannot take it.
            other = await database.connect(db_url, DEFAULT_LIMITS)
            try:
                assert await leader_store.retake(other, holder, within_s=10) is None
            finally:
                await other.close()
        finally:
            await conn.close()
        await read_rows(db_url, "DELETE FROM leases WHERE name = 'checkpoint:x'")


async def test_after_its_database_came_back_the_leader_judges_no_process_dead_within_the_grace(
    db_url: str, tmp_path: Path, proxy: TcpProxy
) -> None:
    grace = 3.0
    async with (
        engine_under_test(db_url, folder(tmp_path, "a"), SCRIPTS, AGENTS, lead=False, db_connect_timeout_s=1.0) as a,
        engine_under_test(
            db_url, folder(tmp_path, "b"), SCRIPTS, AGENTS, lead=True, liveness_poll_s=0.1, db_back_grace_s=grace
        ) as b,  # fmt: skip
    ):
        old = a.engine.deps.holder
        a.process.liveness.url = proxy.url(db_url)
        proxy.pause()
        # The leader's database failed and answered again just now, as after a failover.
        outage = b.process.db.outage
        outage.failed(StorageError("the server closed the connection", None, True))
        await b.engine.store.ping()
        back_at = outage.back_at
        assert back_at is not None
        await kill_liveness(db_url, old)
        await until(lambda: not a.engine.admitted.is_set(), "loss of the mark")
        while time.monotonic() < back_at + grace - 0.3:
            assert await ended_how(db_url, old) is None, "judged dead within the grace"
            await asyncio.sleep(0.05)
        deadline = time.monotonic() + 30
        while await ended_how(db_url, old) != "died":  # after the grace: a mark still free is a death
            assert time.monotonic() < deadline, "the leader never found the process dead after the grace"
            await asyncio.sleep(0.05)
        proxy.resume()
        await until(a.engine.admitted.is_set, "the process admitting runs again")


async def test_the_retake_passes_by_a_lease_the_sweep_holds_instead_of_waiting_on_it(
    db_url: str, tmp_path: Path
) -> None:
    # A sweep claiming one of its leases holds that row while it waits on the process row the retake
    # updates: a retake that waited on the lease deadlocked with it (seen in a failover).
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False) as h:
        holder = h.engine.deps.holder
        for name in ("checkpoint:held", "checkpoint:free"):
            await read_rows(db_url, "INSERT INTO leases (name, holder, expires_at) VALUES (%s, %s, "
                            "now() + interval '1 hour')", name, holder)  # fmt: skip
        await h.process.liveness.release()
        await released(db_url, holder)
        async with await psycopg.AsyncConnection.connect(db_url) as sweep:
            await sweep.execute("SELECT 1 FROM leases WHERE name = 'checkpoint:held' FOR UPDATE")
            conn = await database.connect(db_url, DEFAULT_LIMITS)
            try:
                async with asyncio.timeout(5):
                    assert await leader_store.retake(conn, holder, within_s=10) is not None  # no wait
                lapsed = await read_rows(db_url, "SELECT name, expires_at < now() AS lapsed FROM leases "
                                         "WHERE name LIKE 'checkpoint:%%' ORDER BY name")  # fmt: skip
                assert lapsed == [
                    {"name": "checkpoint:free", "lapsed": True},
                    {"name": "checkpoint:held", "lapsed": False},
                ]
            finally:
                await conn.close()
            await sweep.rollback()
        await read_rows(db_url, "DELETE FROM leases WHERE name IN ('checkpoint:held', 'checkpoint:free')")


async def test_a_loss_the_renewer_reports_takes_the_mark_again_once_and_the_new_mark_is_watched(
    db_url: str, tmp_path: Path
) -> None:
    """The renewer reports every lease lost (renewals that could not get through) while the mark's own
    connection is fine: the mark is taken again once, on a new connection. The watch of the old one is
    stopped before it closes: left waiting on it, it failed a poll later and closed the new mark's
    connection, reporting a second loss (and a third: a run lost that often fails), and the event loop
    went on watching the old descriptor's number for it, whichever socket was given it next."""
    async with engine_under_test(db_url, tmp_path, SCRIPTS, AGENTS, lead=False, liveness_poll_s=0.2) as h:
        engine = h.engine
        old = await mark_session(db_url, engine.deps.holder)
        h.process.keeper.on_lost("renewals failed (the test says so)")
        await until(lambda: engine.marks_lost == 1 and engine.admitted.is_set(), "the mark taken again")
        await asyncio.sleep(1.5)  # several polls of the old watch, had it been left running
        assert engine.marks_lost == 1
        new = await mark_session(db_url, engine.deps.holder)
        assert new is not None and new != old
        # The new mark is watched: its connection ended by the server is noticed as a loss of its own.
        await kill_liveness(db_url, engine.deps.holder)
        await until(lambda: engine.marks_lost == 2, "the new mark's loss noticed", timeout_s=10)
        await until(engine.admitted.is_set, "the process admitting runs again")
