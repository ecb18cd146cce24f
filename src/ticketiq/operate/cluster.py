"""`ticketiq cluster`: production's shape on one machine. A Postgres (the embedded one, or
TICKETIQ_DATABASE_URL; with `--db ha` the pg_auto_failover formation of TICKETIQ_HOME, a primary and its
synchronous standby behind one multi-host URL, which it leaves running), the stand-ins, N app processes
(app1 started first, so it takes the leader lease) and HAProxy in front of them on one port (`edge.py`).
It prints where each part listens, starts an app process that died again on its port after a backoff
(`supervise.py`: the edge sends its requests to the others meanwhile, and a crash loop is left down), and
stops everything it started on Ctrl-C or SIGTERM. Its pid is in TICKETIQ_HOME/cluster.pid while it runs."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from ticketiq.dbserver import formation
from ticketiq.dbserver.authentication import without_password
from ticketiq.dbserver.target import Target, resolve
from ticketiq.errors import RequestError, TicketIQError
from ticketiq.operate import edge
from ticketiq.operate.edge_admin import EdgeAdmin
from ticketiq.operate.launch import Child, free_port, probe_client, start_serve, start_standins
from ticketiq.operate.roll import roll
from ticketiq.operate.slots import Slot
from ticketiq.operate.supervise import Life
from ticketiq.settings import Settings

EDGE_HOST = "127.0.0.1"
POLL_S = 0.2  # how often the children are looked at
PID_FILE = "cluster.pid"
# What the roll in progress (or the last) printed, for `ticketiq cluster roll` to follow: its first line
# numbers the roll, its last says how it ended (ROLL_DONE, ROLL_FAILED).
ROLL_LOG = "cluster.roll"
ROLL_DONE = "rolled:"
ROLL_FAILED = "roll failed:"


def app_names(processes: int) -> list[str]:
    """app1..appN; refused (exit code 2) when there is no process to run."""
    if processes < 1:
        raise RequestError("--processes", f"--processes must be at least 1, not {processes}")
    return [f"app{i}" for i in range(1, processes + 1)]


def checked_port(port: int) -> int:
    if not 1 <= port <= 65535:
        raise RequestError("--port", f"--port must be a TCP port (1 to 65535), not {port}")
    return port


@dataclass(frozen=True)
class Exited:
    """A child that is no longer running."""

    name: str
    pid: int
    returncode: int


def stop_reason(slots_serving: int, edge: Exited | None, standins: Exited | None) -> str | None:
    """Why the whole cluster stops now, or None to keep it running. An app process that died is started
    again; without the edge, the stand-ins or any app process that is not left down, nothing can be served."""
    if edge is not None:
        return f"the edge (haproxy, pid {edge.pid}) exited with code {edge.returncode}; see its log"
    if standins is not None:
        return f"the stand-ins (pid {standins.pid}) exited with code {standins.returncode}; see their log"
    if slots_serving == 0:
        return "every app process is left down after a crash loop"
    return None


def _exited(child: Child) -> Exited | None:
    rc = child.proc.poll()
    return None if rc is None else Exited(child.name, child.pid, rc)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


_roll_asked: list[bool] = []  # set by SIGHUP, taken by the watch loop (a handler only notes it)


def _ask_roll(signum: int, frame: FrameType | None) -> None:
    _roll_asked.append(True)


def run_cluster(settings: Settings, processes: int, port: int, db: str = "embedded") -> int:
    """Start the cluster and watch it until Ctrl-C or SIGTERM; 0 when stopped so, 1 when it fell apart.
    Bad input is refused before anything starts."""
    names = app_names(processes)
    checked_port(port)
    if db == "ha" and settings.database_url:
        raise RequestError("--db", "--db ha runs on the formation of TICKETIQ_HOME: unset TICKETIQ_DATABASE_URL")
    if edge.haproxy_binary() is None:
        raise TicketIQError(edge.MISSING)
    if edge.port_taken(EDGE_HOST, port):
        raise RequestError("--port", f"port {port} on {EDGE_HOST} is in use: choose another --port")
    # Set here, not inherited: a shell starts a background job with SIGINT ignored, and `kill -INT`
    # must stop the cluster all the same.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _ask_roll)  # as gunicorn and nginx: SIGHUP replaces the workers
    pid_file = claim_pid_file(Path(settings.home))
    children: list[Child] = []
    try:
        target = _database(settings, db)
    except BaseException:
        release_pid_file(pid_file)
        raise
    try:
        return _start_and_watch(target.url, names, port, children, ha=db == "ha",
                                home=Path(settings.home), grace_s=settings.shutdown_grace_s)  # fmt: skip
    except KeyboardInterrupt:
        print("stopping ...", flush=True)
        return 0
    finally:
        # A second Ctrl-C must not cut the stop short and leave processes behind; each stop is bounded.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        for child in reversed(children):  # the edge first: no request reaches a process that is stopping
            child.stop()
        release_pid_file(pid_file)
        embedded = target.server is not None
        target.release()  # the embedded server stops here unless another process still uses it
        stopped = ", ".join(f"{c.name} (pid {c.pid})" for c in reversed(children)) or "nothing was running"
        print(f"stopped {stopped}{'; released the embedded Postgres' if embedded else ''}", flush=True)
        if db == "ha":
            print("the HA formation keeps running: `ticketiq db ha down` stops it", flush=True)


def claim_pid_file(home: Path) -> Path:
    """Write this process's pid to home/cluster.pid; refused while the pid it holds is a live cluster."""
    path = home / PID_FILE
    other = _live_pid(path)
    if other is not None and other != os.getpid():
        raise TicketIQError(f"a cluster already runs on {home} (pid {other}, {path}): stop it first, or give "
                            "this one another TICKETIQ_HOME")  # fmt: skip
    home.mkdir(parents=True, exist_ok=True)
    written = path.with_suffix(".pid.new")
    written.write_text(f"{os.getpid()}\n")
    written.replace(path)  # whole or not at all: a reader never sees half a pid
    return path


def release_pid_file(path: Path) -> None:
    """Remove the pid file if it still names this process."""
    if _live_pid(path) == os.getpid():
        path.unlink(missing_ok=True)


def _live_pid(path: Path) -> int | None:
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # alive, another user's
    return pid


def _database(settings: Settings, db: str) -> Target:
    """The embedded server (or TICKETIQ_DATABASE_URL), or the HA formation, brought up if it is not."""
    if db != "ha":
        return resolve(settings)
    made = formation.up(Path(settings.home), say=lambda line: print(f"db ha     {line}", flush=True))
    state = "was up" if made.already else f"up in {made.seconds:.1f} s"
    print(f"db ha     {made.status.verdict.message if made.status.verdict else ''} ({state})", flush=True)
    return Target(url=made.url)


def _start_and_watch(
    db_url: str,
    names: list[str],
    port: int,
    children: list[Child],
    ha: bool = False,
    home: Path | None = None,
    grace_s: float = 10.0,
) -> int:
    logs = Path(tempfile.mkdtemp(prefix="ticketiq-cluster-"))
    env = {**os.environ, "TICKETIQ_DATABASE_URL": db_url}
    print(f"database  {without_password(db_url)}  (logs in {logs})", flush=True)
    standins = start_standins(env, logs)
    children.append(standins)
    print(f"stand-ins pid {standins.pid}: {standins.env['TICKETIQ_MODEL_BASE_URL'].removesuffix('/v1')}", flush=True)
    slots: list[Slot] = []
    backends: list[edge.Backend] = []
    for name in names:  # one at a time: the first migrates the database and takes the leader lease
        app_port = free_port()
        app_env = {**env, **standins.env}
        started = time.monotonic()
        app, base = start_serve(app_env, logs, port=app_port, name=name)
        children.append(app)
        slots.append(Slot(name, app_port, app_env, logs, app, [Life(started)]))
        backends.append(edge.Backend(name, "127.0.0.1", app_port))
        leads = "  (started first: it leads)" if len(slots) == 1 else ""
        print(f"{name:<9} pid {app.pid}: {base}{leads}", flush=True)
    admin_socket = admin_socket_path(logs)
    front = edge.start_edge(port, backends, logs, admin_socket=admin_socket)
    children.append(front)
    url = f"http://{EDGE_HOST}:{port}"
    print(f"edge      pid {front.pid}: {url}  (haproxy; {logs / 'haproxy.cfg'})", flush=True)
    print(f"try       curl -s {url}/readyz   # each answer names the process that gave it", flush=True)
    same = (
        f"TICKETIQ_DATABASE_URL='{without_password(db_url)}'"
        if ha
        else "the same TICKETIQ_HOME or TICKETIQ_DATABASE_URL"
    )
    print(f"          API calls need a token: ticketiq tokens create --name me --role operator (with {same})",
          flush=True)  # fmt: skip
    print("running; Ctrl-C stops them all; `ticketiq cluster roll` (or SIGHUP) replaces the app processes",
          flush=True)  # fmt: skip
    rolling = Rolling(EdgeAdmin(admin_socket), (home or logs) / ROLL_LOG, grace_s)
    try:
        return _watch(slots, standins, front, children, rolling)
    finally:
        if admin_socket.parent != logs:  # a folder of its own under /tmp: nothing else is in it
            shutil.rmtree(admin_socket.parent, ignore_errors=True)


def admin_socket_path(logs: Path) -> Path:
    """Where the edge's runtime API listens: beside its log, unless that path is too long for a Unix socket
    (a deep TMPDIR); then in a folder of its own under /tmp, the user's only (mkdtemp: mode 700)."""
    beside = logs / "haproxy.sock"
    if len(str(beside)) <= edge.SOCKET_PATH_MAX:
        return beside
    return Path(tempfile.mkdtemp(prefix="ticketiq-edge-", dir="/tmp")) / "admin.sock"


@dataclass
class Rolling:
    """How the watch loop rolls the app processes when asked (SIGHUP)."""

    admin: EdgeAdmin
    log: Path
    grace_s: float

    def run(self, slots: list[Slot], children: list[Child]) -> None:
        number = last_roll(self.log) + 1
        before = [slot.child for slot in slots]
        with open(self.log, "w", buffering=1) as out:
            out.write(f"roll {number}\n")

            def say(line: str) -> None:
                print(f"roll      {line}", flush=True)
                out.write(line + "\n")

            try:
                done = roll(slots, self.admin, say, self.grace_s)
            except Exception as exc:  # the edge's API refused, a process could not be started: said, not hidden
                say(f"{ROLL_FAILED} {exc}")
            else:
                say(f"{ROLL_DONE} every app process replaced" if done.ok else f"{ROLL_FAILED} {done.reason}")
            finally:
                for old, slot in zip(before, slots, strict=True):
                    if slot.child is not old:
                        children[children.index(old)] = slot.child  # stopped at the end, as the one before
                        print(f"{slot.name:<9} pid {slot.child.pid}: {slot.base}  (rolled)", flush=True)


def ask_roll(home: Path, timeout_s: float = 600.0) -> int:
    """`ticketiq cluster roll`: SIGHUP to the cluster of `home`, then its roll's lines as they come; 0 when
    every app process was replaced, 1 when the roll failed or no cluster runs there."""
    pid = _live_pid(home / PID_FILE)
    if pid is None:
        raise TicketIQError(f"no cluster runs on {home} (no live pid in {home / PID_FILE}): start one with "
                            "`ticketiq cluster`, with this TICKETIQ_HOME")  # fmt: skip
    log = home / ROLL_LOG
    before = last_roll(log)
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout_s
    shown = 0
    while time.monotonic() < deadline:
        lines = log.read_text().splitlines() if last_roll(log) > before else []
        for line in lines[1:][shown:]:
            print(line, flush=True)
        shown = max(shown, len(lines) - 1)
        if lines and lines[-1].startswith(ROLL_DONE):
            return 0
        if lines and lines[-1].startswith(ROLL_FAILED):
            return 1
        if _live_pid(home / PID_FILE) != pid:
            print(f"{ROLL_FAILED} the cluster (pid {pid}) stopped during the roll", flush=True)
            return 1
        time.sleep(0.1)
    print(f"{ROLL_FAILED} no end within {timeout_s:.0f} s; the cluster's output says where it is", flush=True)
    return 1


def last_roll(log: Path) -> int:
    """The number of the last roll its log names (0: none yet)."""
    try:
        first = log.read_text().split("\n", 1)[0]
    except FileNotFoundError:
        return 0
    words = first.split()
    return int(words[1]) if len(words) == 2 and words[0] == "roll" and words[1].isdigit() else 0


def _watch(slots: list[Slot], standins: Child, front: Child, children: list[Child], rolling: Rolling) -> int:
    """Start again the app processes that die, roll them when asked; stop when nothing can be served."""
    with probe_client() as client:
        while True:
            if _roll_asked:
                _roll_asked.clear()
                rolling.run(slots, children)
            now = time.monotonic()
            for slot in slots:
                was = slot.child
                for line in slot.look(now, client):
                    print(line, flush=True)
                if slot.child is not was:
                    children[children.index(was)] = slot.child  # stopped at the end, as the one before
            serving = sum(1 for slot in slots if not slot.down)
            reason = stop_reason(serving, _exited(front), _exited(standins))
            if reason is not None:
                print(f"{reason}: stopping the rest", flush=True)
                return 1
            time.sleep(POLL_S)
