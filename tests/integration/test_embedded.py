"""The embedded server of a home, for real (its own temporary home, not the suite's Postgres): the port
it keeps across stops and kills, a clear refusal when another program took that port, the processes'
watch that starts a killed server again (one of them), and a server stopped on purpose left stopped."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from ticketiq.dbserver import embedded
from ticketiq.dbserver.embedded import Revived, ServerStartFailed
from ticketiq.dbserver.postmaster import ServerState, StartFailure, parse_pidfile
from ticketiq.dbserver.watch import ServerWatch
from ticketiq.errors import StorageError
from ticketiq.storage.database import Database

WITHIN_S = 120.0  # generous: a shared 2-core machine; nothing here is timed


@pytest.fixture
def home() -> Iterator[Path]:
    """A home of its own, outside pytest's temporary root (whose mode pytest narrows at each session)."""
    with tempfile.TemporaryDirectory(prefix="ticketiq-test-home-") as folder:
        path = Path(folder) / "home"
        try:
            yield path
        finally:
            embedded.stop(path)


def answers(server: embedded.EmbeddedServer) -> bool:
    try:
        with psycopg.connect(server.url(), connect_timeout=2) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


async def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WITHIN_S
    while not check():
        assert time.monotonic() < deadline, f"{what} did not happen within {WITHIN_S:g} s"
        await asyncio.sleep(0.05)


def back(home: Path, killed: int) -> bool:
    """A new postmaster runs, ready (the killed one may take a moment to die)."""
    return embedded.postmaster_pid(home) not in (None, killed) and embedded.state(home) is ServerState.READY


def kill_postmaster(home: Path) -> int:
    """SIGKILL the postmaster; return once it is dead (a signal takes a moment to land)."""
    pid = embedded.postmaster_pid(home)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + WITHIN_S
    while embedded.postmaster_pid(home) == pid:
        assert time.monotonic() < deadline, f"postmaster {pid} outlived its SIGKILL"
        time.sleep(0.001)
    return pid


def test_the_port_is_kept_across_a_stop_and_a_kill(home: Path) -> None:
    server = embedded.acquire(home, keep=True)
    assert embedded.kept_port(home) == server.port
    assert embedded.stop(home)
    again = embedded.acquire(home, keep=True)  # as `ticketiq db url` after `ticketiq db stop`
    assert again.port == server.port and answers(again)
    killed = kill_postmaster(home)
    after = embedded.acquire(home, keep=True)  # as `ticketiq db url`, or a process start, after a crash
    assert after.port == server.port and answers(after)
    assert embedded.postmaster_pid(home) not in (None, killed)


def test_a_port_taken_by_another_program_is_a_clear_refusal_and_starts_nothing(home: Path) -> None:
    server = embedded.acquire(home, keep=True)
    assert embedded.stop(home)
    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        squatter.bind(("127.0.0.1", server.port))
        squatter.listen(1)
        with pytest.raises(ServerStartFailed) as refused:
            embedded.acquire(home)
        message = str(refused.value)
        assert refused.value.failure is StartFailure.PORT_TAKEN
        assert f"port {server.port}" in message and str(home.resolve() / "pg.port") in message
        assert "restart every process that holds the old URL" in message
        assert embedded.state(home) is ServerState.GONE  # never silently another port
        assert embedded.kept_port(home) == server.port
        # A watcher gets the same refusal and starts nothing either.
        (home / "pg.stopped").unlink(missing_ok=True)
        with pytest.raises(ServerStartFailed):
            embedded.revive(server)
        assert embedded.state(home) is ServerState.GONE
    finally:
        squatter.close()
    assert embedded.acquire(home).port == server.port  # the port free again: the same one


async def test_of_two_watchers_one_starts_a_killed_server_again_on_its_port_and_the_other_finds_it(
    home: Path,
) -> None:
    server = await asyncio.to_thread(embedded.acquire, home, True)
    watches = [ServerWatch(server, every_s=0.05), ServerWatch(server, every_s=0.05)]
    for watch in watches:
        watch.start()
    try:
        killed = kill_postmaster(home)
        await until(lambda: back(home, killed) and any(w.started for w in watches), "a new postmaster ready")
        assert await asyncio.to_thread(answers, server)  # on the port everyone's URL names
        # Both have looked again since: the server runs, so neither starts another.
        looks = [w.looks for w in watches]
        await until(lambda: all(w.looks > n + 1 for w, n in zip(watches, looks, strict=True)), "looks again")
        assert sorted(w.started for w in watches) == [0, 1]
    finally:
        for watch in watches:
            await watch.stop()


async def test_a_server_stopped_on_purpose_is_left_stopped_until_started_on_purpose(home: Path) -> None:
    server = await asyncio.to_thread(embedded.acquire, home, True)
    watch = ServerWatch(server, every_s=0.05)
    watch.start()
    try:
        assert await asyncio.to_thread(embedded.stop, home)  # `ticketiq db stop`
        await until(lambda: watch.last is Revived.LEFT_STOPPED, "the watch seeing it stopped on purpose")
        assert embedded.state(home) is ServerState.GONE and watch.started == 0
        again = await asyncio.to_thread(embedded.acquire, home, True)  # `ticketiq db url`
        assert again.port == server.port
        assert await asyncio.to_thread(answers, server)
        # Killed after that start, it is started again: the mark of the stop went with the start.
        killed = kill_postmaster(home)
        await until(lambda: watch.started == 1 and back(home, killed), "the restart")
    finally:
        await watch.stop()


def test_a_url_naming_the_home_s_server_makes_the_process_a_user_of_it(home: Path) -> None:
    server = embedded.acquire(home)  # not kept: its last user stops it
    adopted = embedded.adopt(home, server.url("ticketiq"))
    assert adopted == server
    assert embedded.adopt(home, f"postgresql://postgres@127.0.0.1:{server.port + 1}/ticketiq") is None
    assert embedded.adopt(home, f"postgresql://postgres@db.internal:{server.port}/ticketiq") is None
    # Another process given the URL is a user as well: this one's release does not stop it under it.
    other = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from ticketiq.dbserver import embedded; "
         "assert embedded.adopt(Path(sys.argv[1]), sys.argv[2]); print('ok', flush=True); time.sleep(600)",
         str(home), server.url("ticketiq")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert other.stdout is not None and other.stdout.readline().strip() == "ok"
        embedded.release(server)
        embedded.release(adopted)
        assert embedded.state(home) is ServerState.READY and answers(server)
    finally:
        other.kill()
        other.wait()
        if other.stdout is not None:
            other.stdout.close()
    # Its only other user dead, the next release is the last: it stops the server.
    embedded.release(embedded.acquire(home))
    assert embedded.state(home) is ServerState.GONE


def test_a_killed_process_not_yet_reaped_counts_as_gone() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + WITHIN_S
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(child.pid, 0)  # the kernel still knows the pid (a zombie) ...
        assert not embedded._alive(child.pid)  # ... and a postmaster left so is no server
    finally:
        child.wait()


async def test_after_a_restart_the_first_statement_that_finds_a_cut_connection_has_the_idle_ones_checked(
    home: Path,
) -> None:
    server = await asyncio.to_thread(embedded.acquire, home, True)
    db = Database(server.url(), min_size=4, max_size=4)
    await db.open()
    try:
        # A restart (a stop and a start) cuts the four idle connections; nothing tells the pool yet.
        assert await asyncio.to_thread(embedded.stop, home)
        await asyncio.to_thread(embedded.acquire, home, True)
        with pytest.raises(StorageError):
            await db.fetch_one("runs.ping")  # given a cut connection
        # That one failure has the three idle beside it checked and replaced ...
        await until(lambda: db.pool.get_stats().get("connections_lost", 0) >= 3, "the idle connections checked")
        # ... so no statement after it is given one: each answers.
        for _ in range(8):
            assert await db.fetch_one("runs.ping") is not None
    finally:
        await db.close()


def revive_once(server: embedded.EmbeddedServer) -> Revived | StartFailure:
    try:
        return embedded.revive(server)
    except ServerStartFailed as exc:
        return exc.failure


# Attaches the System V segment whose id it is given, as a backend of the server does, and holds it
# until its stdin closes: a process of a killed server that has not exited yet.
HOLD_SEGMENT = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
at = libc.shmat(int(sys.argv[1]), None, 0o10000)  # SHM_RDONLY
assert at not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
print("attached", flush=True)
sys.stdin.read()
"""


def test_no_start_shares_the_folder_with_a_process_of_the_killed_server(home: Path) -> None:
    server = embedded.acquire(home, keep=True)
    postmaster = parse_pidfile((home / "pg" / "postmaster.pid").read_text())
    assert postmaster is not None and postmaster.shm_id is not None
    old = subprocess.Popen([sys.executable, "-c", HOLD_SEGMENT, str(postmaster.shm_id)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert old.stdout is not None and old.stdout.readline().strip() == "attached"
        killed = kill_postmaster(home)
        # Postgres refuses while the old segment is attached, and the refusal says to try again.
        with pytest.raises(ServerStartFailed) as refused:
            embedded.revive(server)
        assert refused.value.failure is StartFailure.OLD_PROCESSES
        assert embedded.state(home) is ServerState.GONE
        assert (home / "pg" / "postmaster.pid").exists()  # its lock file is not taken away under it
    finally:
        assert old.stdin is not None
        old.stdin.close()
        old.wait()
        if old.stdout is not None:
            old.stdout.close()
    # Gone, the old process holds nothing: the next try starts the server, on its port.
    deadline = time.monotonic() + WITHIN_S
    while (found := revive_once(server)) is not Revived.STARTED:
        assert found is StartFailure.OLD_PROCESSES, found  # the zombie not reaped yet, say: wait
        assert time.monotonic() < deadline, "the server was not started again"
        time.sleep(0.2)
    assert back(home, killed) and answers(server)
