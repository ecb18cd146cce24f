"""What an embedded server's data folder says about its postmaster, and what a process that uses it does
about it: pure decisions over plain data (`embedded.py` reads the files, `watch.py` acts).

postmaster.pid is Postgres's own lock file: line 1 the postmaster's pid, line 4 its port, line 7 the
key and id of its System V shared memory segment, line 8 its status (`starting`, `stopping`, `ready`,
`standby`). A SIGKILLed postmaster leaves it behind naming a dead pid; Postgres itself clears such a
file at its next start, once no process attaches that segment (none of the old server's is left).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import psycopg
from psycopg.conninfo import conninfo_to_dict

# Hosts under which a URL names the embedded server, which listens on 127.0.0.1 only.
LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost"})


@dataclass(frozen=True)
class Postmaster:
    """What postmaster.pid says."""

    pid: int
    port: int | None
    status: str  # "" while the server has not written it yet
    shm_id: int | None = None  # its shared memory segment; every process of the server attaches it


def parse_pidfile(text: str) -> Postmaster | None:
    """The postmaster a postmaster.pid names; None for a file too short or garbled to name one."""
    lines = text.splitlines()
    try:
        pid = int(lines[0])
    except (IndexError, ValueError):
        return None
    try:
        port: int | None = int(lines[3])
    except (IndexError, ValueError):
        port = None
    status = lines[7].strip() if len(lines) > 7 else ""
    try:
        shm_id: int | None = int(lines[6].split()[1])
    except (IndexError, ValueError):
        shm_id = None
    return Postmaster(pid, port, status, shm_id)


class ServerState(StrEnum):
    READY = "ready"  # its postmaster lives and accepts connections
    BUSY = "busy"  # its postmaster lives and is starting, recovering or stopping: wait
    GONE = "gone"  # no postmaster: never started, stopped, or killed (its pid file left behind)


def server_state(postmaster: Postmaster | None, alive: bool) -> ServerState:
    """`alive`: whether the pid the file names is a live process (a zombie is not)."""
    if postmaster is None or not alive:
        return ServerState.GONE
    return ServerState.READY if postmaster.status == "ready" and postmaster.port else ServerState.BUSY


class Revival(StrEnum):
    NOTHING = "nothing"  # it runs
    WAIT = "wait"  # its postmaster is starting or stopping: look again
    LEAVE_STOPPED = "leave_stopped"  # stopped on purpose (`ticketiq db stop`): an operator starts it
    START = "start"  # gone without being stopped: start it again, on its port


def revival(state: ServerState, stopped_on_purpose: bool) -> Revival:
    """What a process using the server does on finding it in `state`. A server stopped on purpose stays
    stopped: an operator stopped it (to back up or move its folder, say), and processes that started it
    again would undo that behind their back. Anything else that left it gone (a SIGKILL, a crash, the
    OOM killer) did not mean it to stay down."""
    if state is ServerState.READY:
        return Revival.NOTHING
    if state is ServerState.BUSY:
        return Revival.WAIT
    return Revival.LEAVE_STOPPED if stopped_on_purpose else Revival.START


class StartFailure(StrEnum):
    OLD_PROCESSES = "old_processes"  # the killed server's processes still hold the folder: try again soon
    PORT_TAKEN = "port_taken"  # another program listens on the port: an operator must act
    OTHER = "other"


def start_failure(server_log: str) -> StartFailure:
    """Why a start failed, from the end of the server's log."""
    if "is still in use" in server_log or ("lock file" in server_log and "already exists" in server_log):
        # Backends of a SIGKILLed postmaster exit at their next wait; its pid may linger as a zombie
        # until init reaps it. Postgres refuses to start until both are gone (it never shares a folder).
        return StartFailure.OLD_PROCESSES
    if "could not bind" in server_log and "Address already in use" in server_log:
        return StartFailure.PORT_TAKEN
    return StartFailure.OTHER


def stale_lock(postmaster: Postmaster, zombie: bool, attached: int | None) -> bool:
    """Whether a lock file may be removed before a start. Postgres clears a dead postmaster's file
    itself, but takes a zombie (killed, not yet reaped by its parent, init) for alive and refuses to
    start until init reaps it, which a container's init may never do. Its file is stale once nothing
    attaches its shared memory (`attached`: how many processes do, None when that cannot be known), the
    test Postgres itself applies: no process of the old server is left to share the folder with."""
    return zombie and postmaster.shm_id is not None and attached == 0


def names_port(url: str, port: int) -> bool:
    """Whether a database URL (or conninfo string) points at 127.0.0.1:`port`, where an embedded server
    listens: how a process given TICKETIQ_DATABASE_URL knows it is its home's embedded server."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error:  # a malformed URL names no server; connecting says what is wrong with it
        return False
    host = str(params.get("host") or params.get("hostaddr") or "")
    try:
        return host in LOCAL_HOSTS and int(params.get("port") or 5432) == port
    except ValueError:
        return False
