"""What a process concludes from its database failing and coming back (storage/outage.py), and how many
copies a commit has (storage/synchrony.py): pure decisions, no database."""

from __future__ import annotations

import random

import psycopg
import pytest

from ticketiq.errors import StorageError
from ticketiq.storage.outage import BACKOFF_CAP_S, BACKOFF_FIRST_S, Outage, backoff_s, server_gone
from ticketiq.storage.synchrony import synchrony


def test_backoff_starts_fast_doubles_and_is_capped_with_jitter() -> None:
    rng = random.Random(7)
    waits = [backoff_s(n, rng) for n in range(8)]
    assert BACKOFF_FIRST_S * 0.75 <= waits[0] <= BACKOFF_FIRST_S
    assert all(w <= BACKOFF_CAP_S for w in waits)
    assert waits[-1] >= BACKOFF_CAP_S * 0.75  # capped, not grown without bound
    assert backoff_s(2, random.Random(1)) != backoff_s(2, random.Random(2))  # processes do not retry in step


def test_a_failure_counts_as_an_outage_only_when_the_server_went_away() -> None:
    assert server_gone(StorageError("no answer", None, True))
    assert server_gone(StorageError("reset", "08006", True))
    assert server_gone(StorageError("shutdown", "57P01", True))
    assert server_gone(StorageError("a standby answered", "25006", True))
    assert not server_gone(StorageError("deadlock", "40P01", True))  # the statement, not the server
    assert not server_gone(StorageError("bad input", "22P02", False))
    assert server_gone(psycopg.OperationalError("connection refused"))
    assert server_gone(ConnectionResetError())
    assert not server_gone(ValueError("ours"))


def test_the_sweep_settles_while_down_and_for_the_grace_after_the_database_came_back() -> None:
    outage = Outage()
    assert not outage.settling(1.0, now=0.0)  # never down: nothing to wait for
    outage.failed(StorageError("deadlock", "40P01", True), now=1.0)
    assert not outage.down  # a statement's failure is not an outage
    outage.failed(StorageError("gone", None, True), now=2.0)
    outage.failed(StorageError("gone again", None, True), now=3.0)
    assert outage.down and outage.down_since == 2.0 and outage.outages == 1
    assert outage.settling(1.0, now=100.0)  # down: however long
    outage.answered(now=101.0)
    assert not outage.down
    assert outage.settling(1.0, now=101.9)
    assert not outage.settling(1.0, now=102.0)
    outage.answered(now=200.0)  # answers while up move nothing
    assert outage.back_at == 101.0


def test_a_commit_has_two_copies_only_while_a_synchronous_standby_streams() -> None:
    both = synchrony("ANY 1 (pgautofailover_standby_2)", "on", streaming=1, synchronous=1)
    assert (both.copies, both.view()["synchronous"]) == (2, True)
    alone = synchrony("", "on", streaming=0, synchronous=0)  # wait_primary, or the embedded server
    assert alone.copies == 1 and alone.says.startswith("ONE COPY")
    named_gone = synchrony("ANY 1 (pgautofailover_standby_2)", "on", streaming=0, synchronous=0)
    assert named_gone.copies == 1 and "commits wait for it" in named_gone.says
    local = synchrony("ANY 1 (s)", "local", streaming=1, synchronous=1)  # commits do not wait for it
    assert local.copies == 1 and "asynchronously" in local.says


def test_the_host_that_last_took_a_connection_is_tried_first() -> None:
    from ticketiq.storage.hosts import preferring

    url = "host=127.0.0.1,127.0.0.1 port=5001,5002 dbname=ticketiq target_session_attrs=read-write"
    moved = preferring(url, "127.0.0.1", "5002")
    assert "port=5002,5001" in moved and "target_session_attrs=read-write" in moved
    assert preferring(url, "127.0.0.1", "5001") == preferring(url, "127.0.0.1", "5001")  # first already
    assert "port=5001,5002" in preferring(url, "127.0.0.1", "5001")
    assert preferring(url, "10.0.0.9", "5002") == url  # not one of its hosts
    single = "host=127.0.0.1 port=5001 dbname=ticketiq"
    assert preferring(single, "127.0.0.1", "5001") == single
    shared = preferring("host=a,b port=5432 dbname=x", "b", "5432")
    assert "host=b,a" in shared and "port=5432,5432" in shared


async def test_a_host_that_does_not_answer_is_raced_after_its_head_start() -> None:
    import asyncio
    import time

    from ticketiq.storage import hosts

    closed: list[str] = []

    async def connect(conninfo: str) -> str:
        if "port=1" in conninfo:
            await asyncio.sleep(5)  # frozen: it would answer only at its connect timeout
        if "port=3" in conninfo:
            raise OSError("refused")
        return conninfo

    async def close(conn: str) -> None:
        closed.append(conn)

    attempts = hosts.split("host=a,b,c port=1,2,3 dbname=x")
    assert [("port=1" in a, "host=b" in a) for a in attempts] == [(True, False), (False, True), (False, False)]
    began = time.monotonic()
    won = await hosts.first_of(attempts, connect, close)
    assert "host=b" in won and time.monotonic() - began < 1.0  # after the head start, not the timeout
    assert closed == []  # the frozen one was cancelled before it connected
    with pytest.raises(OSError, match="refused"):
        await hosts.first_of([attempts[2]], connect, close)
    assert hosts.split("host=a port=1") == ["host=a port=1"]


async def test_a_host_that_fails_beside_a_frozen_one_is_tried_again_until_it_takes_the_connection() -> None:
    import asyncio
    import time

    from ticketiq.storage import hosts

    tries = {"b": 0}

    async def connect(conninfo: str) -> str:
        if "host=a" in conninfo:
            await asyncio.sleep(2.0)  # frozen until its connect timeout
            raise OSError("connection timeout expired")
        tries["b"] += 1
        if tries["b"] < 3:
            raise OSError("session is read-only")  # the standby, not yet promoted
        return conninfo

    async def close(conn: str) -> None:
        return None

    began = time.monotonic()
    won = await hosts.first_of(hosts.split("host=a,b port=1,2 dbname=x"), connect, close)
    assert "host=b" in won and tries["b"] == 3
    assert time.monotonic() - began < 1.5  # not after the frozen host's timeout
