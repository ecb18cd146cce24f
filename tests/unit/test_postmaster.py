"""The embedded server's pure decisions: what postmaster.pid says, what a process using the server does
on finding it gone, why a start failed, and which URLs name it."""

from __future__ import annotations

import pytest

from ticketiq.dbserver.postmaster import (
    Postmaster,
    Revival,
    ServerState,
    StartFailure,
    names_port,
    parse_pidfile,
    revival,
    server_state,
    stale_lock,
    start_failure,
)

# A postmaster.pid as Postgres 18 writes it for a ready server (pid, data folder, start time, port,
# socket directory, listen address, shared memory key and id, status).
READY_PIDFILE = "18161\n/tmp/h/pg\n1796326228\n48123\n\n127.0.0.1\n  2161532     65550\nready   \n"


def test_a_pidfile_names_the_postmaster_its_port_and_its_status() -> None:
    assert parse_pidfile(READY_PIDFILE) == Postmaster(18161, 48123, "ready", shm_id=65550)
    # Written in steps while the server starts: the port and status come later.
    assert parse_pidfile("18161\n/tmp/h/pg\n") == Postmaster(18161, None, "")
    assert parse_pidfile("18161\n/tmp/h/pg\n1796326228\n48123\n\n127.0.0.1\n  1 2\nstarting\n") == Postmaster(
        18161, 48123, "starting", shm_id=2
    )
    assert parse_pidfile("") is None
    assert parse_pidfile("not a pid\n") is None


@pytest.mark.parametrize(
    ("postmaster", "alive", "state"),
    [
        (Postmaster(1, 5432, "ready"), True, ServerState.READY),
        (Postmaster(1, 5432, "starting"), True, ServerState.BUSY),  # starting, or recovering from a crash
        (Postmaster(1, 5432, "stopping"), True, ServerState.BUSY),
        (Postmaster(1, None, ""), True, ServerState.BUSY),  # the file half written
        (Postmaster(1, 5432, "ready"), False, ServerState.GONE),  # SIGKILLed: the file left behind
        (None, False, ServerState.GONE),  # never started, or stopped
    ],
)
def test_the_server_is_ready_busy_or_gone(postmaster: Postmaster | None, alive: bool, state: ServerState) -> None:
    assert server_state(postmaster, alive) is state


def test_a_server_gone_is_started_again_unless_it_was_stopped_on_purpose() -> None:
    assert revival(ServerState.GONE, stopped_on_purpose=False) is Revival.START
    assert revival(ServerState.GONE, stopped_on_purpose=True) is Revival.LEAVE_STOPPED
    for on_purpose in (False, True):
        assert revival(ServerState.READY, on_purpose) is Revival.NOTHING
        # Midway through starting or stopping: never a second start on one folder.
        assert revival(ServerState.BUSY, on_purpose) is Revival.WAIT


def test_a_zombie_postmaster_s_lock_file_is_stale_once_nothing_attaches_its_shared_memory() -> None:
    killed = Postmaster(18161, 48123, "ready", shm_id=65550)
    assert stale_lock(killed, zombie=True, attached=0)
    # A backend of the killed server still runs: Postgres must not start beside it.
    assert not stale_lock(killed, zombie=True, attached=2)
    assert not stale_lock(killed, zombie=True, attached=None)  # cannot be known: never removed
    # A live postmaster's file, or a dead one's (Postgres clears that itself), is never removed.
    assert not stale_lock(killed, zombie=False, attached=0)
    assert not stale_lock(Postmaster(18161, 48123, "ready"), zombie=True, attached=0)  # no segment named


@pytest.mark.parametrize(
    ("log", "failure"),
    [
        # What Postgres 18 logs when it refuses to start beside a killed server's processes.
        (
            "2026-12-03 19:40:01.101 UTC [1] FATAL:  pre-existing shared memory block (key 2161532, ID 65550) is "
            "still in use\n2026-12-03 19:40:01.101 UTC [1] HINT:  Terminate any old server processes associated "
            'with data directory "/tmp/h/pg".',
            StartFailure.OLD_PROCESSES,
        ),
        (
            '2026-12-03 19:40:01.101 UTC [1] FATAL:  lock file "postmaster.pid" already exists\n'
            "2026-12-03 19:40:01.101 UTC [1] HINT:  Is another postmaster (PID 18161) running in data directory "
            '"/tmp/h/pg"?',
            StartFailure.OLD_PROCESSES,
        ),
        (
            '2026-12-03 19:40:01.101 UTC [1] LOG:  could not bind IPv4 address "127.0.0.1": Address already in use\n'
            '2026-12-03 19:40:01.101 UTC [1] WARNING:  could not create listen socket for "127.0.0.1"\n'
            "2026-12-03 19:40:01.101 UTC [1] FATAL:  could not create any TCP/IP sockets",
            StartFailure.PORT_TAKEN,
        ),
        ("2026-12-03 19:40:01.101 UTC [1] FATAL:  data directory has invalid permissions", StartFailure.OTHER),
        ("", StartFailure.OTHER),
    ],
)
def test_a_failed_start_says_whether_trying_again_helps(log: str, failure: StartFailure) -> None:
    assert start_failure(log) is failure


def test_a_url_names_the_embedded_server_by_its_local_host_and_kept_port() -> None:
    assert names_port("postgresql://postgres@127.0.0.1:48123/ticketiq", 48123)
    assert names_port("postgresql://postgres@localhost:48123/tq_test_1", 48123)
    assert names_port("host=127.0.0.1 port=48123 dbname=ticketiq user=postgres", 48123)
    assert not names_port("postgresql://postgres@127.0.0.1:48124/ticketiq", 48123)  # another port
    assert not names_port("postgresql://postgres@db.internal:48123/ticketiq", 48123)  # another host
    assert not names_port("postgresql:///ticketiq", 48123)  # a socket, port 5432
    assert not names_port("postgresql://postgres@127.0.0.1/ticketiq", 48123)
    assert not names_port("not a url at all", 48123)
