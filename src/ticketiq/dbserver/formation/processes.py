"""The formation's processes on this machine: the user they run as, `pg_autoctl` commands run as that
user (waited for, or started as a service that outlives the command), and a node's processes found and
signalled by pid.

pg_autoctl refuses to run as root, and so does Postgres. As root, the formation runs as a system user of
its own (`ticketiq-pg`, made with `useradd --system` when missing), owns its folder, and the folder's
parents are made traversable (o+x) so that user can reach it. As anyone else it runs as that user.

A process is only ever signalled once it is shown to be the formation's: the `pg_autoctl run` the state
file recorded (same pid and start time), or the one pg_autoctl's pid file names and whose command line
names the node's data folder; the postmaster that the data folder's postmaster.pid names and whose
command line names it too; their children; and any process of the formation's user whose environment
holds the node's own XDG_RUNTIME_DIR (a folder of the formation), which pg_autoctl's processes and the
postmaster inherit, so that one left behind by a killed parent is still found. Nothing is looked up by
name alone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

from ticketiq.dbserver.formation.plan import (
    SYSTEM_USER,
    FormationError,
    Keeper,
    KeeperPidfile,
    Layout,
    parse_keeper_pidfile,
    postgres_bin_dir,
)
from ticketiq.dbserver.formation.synchrony import Process
from ticketiq.dbserver.postmaster import parse_pidfile

MISSING = (
    "pg_auto_failover is not installed: run `make pg-auto-failover` "
    "(apt-get install -y postgresql-15-auto-failover pg-auto-failover-cli)"
)
DEBIAN_PATH = "/usr/bin/pg_autoctl"
POSTGRES_LIBS = Path("/usr/lib/postgresql")
# Started through sh so that it is not our child: `setsid` gives it a session of its own (a Ctrl-C in the
# terminal of `up` does not reach it), and once sh exits it is init's to reap, whoever started it. sh
# prints its pid; setsid execs in place (sh's background job leads no process group), so it is the same.
_LAUNCH = 'setsid "$@" </dev/null >>"$TICKETIQ_HA_LOG" 2>&1 & echo $!'
_POLL_S = 0.05


def pg_autoctl_binary() -> str | None:
    found = shutil.which("pg_autoctl")
    if found:
        return found
    return DEBIAN_PATH if os.access(DEBIAN_PATH, os.X_OK) else None


def binaries() -> tuple[str, Path]:
    """pg_autoctl and the bin folder of the Postgres whose pgautofailover extension is installed."""
    pg_autoctl = pg_autoctl_binary()
    bin_dir = postgres_bin_dir(POSTGRES_LIBS.glob("*/lib/pgautofailover.so"))
    if pg_autoctl is None or bin_dir is None or not (bin_dir / "pg_ctl").exists():
        raise FormationError(MISSING)
    return pg_autoctl, bin_dir


@dataclass(frozen=True)
class RunAs:
    """Who the formation's processes run as."""

    user: str
    uid: int
    gid: int
    switch: bool  # root runs them as `user`; anyone else is `user`
    pg_autoctl: str

    @classmethod
    def for_plan(cls, user: str, pg_autoctl: str) -> RunAs:
        """Root runs the formation as its user (the system user, made when missing); anyone else must be
        that user."""
        if os.geteuid() == 0:
            entry = ensure_system_user(user) if user == SYSTEM_USER else _user(user)
            return cls(user, entry.pw_uid, entry.pw_gid, True, pg_autoctl)
        if _user(user).pw_uid != os.geteuid():
            raise FormationError(f"this formation runs as {user}: run ticketiq as {user}, or as root")
        return cls(user, os.geteuid(), os.getegid(), False, pg_autoctl)

    def _popen_identity(self) -> tuple[int | None, int | None, list[int] | None]:
        """subprocess's user, group and extra_groups: unchanged, or the formation user's alone."""
        return (self.uid, self.gid, []) if self.switch else (None, None, None)

    def run(self, args: Sequence[str], env: dict[str, str], log: Path, timeout_s: float) -> None:
        """Run a pg_autoctl command (or another program: initdb) to its end, its output appended to `log`."""
        command = [self.pg_autoctl, *args[1:]] if args[0] == "pg_autoctl" else list(args)
        user, group, extra_groups = self._popen_identity()
        with open(log, "ab") as out:
            try:
                done = subprocess.run(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                      env=env, timeout=timeout_s, user=user, group=group,
                                      extra_groups=extra_groups)  # fmt: skip
            except subprocess.TimeoutExpired:
                raise FormationError(f"`{' '.join(args[:3])}` did not end within {timeout_s:g} s; see {log}:\n"
                                     f"{tail(log)}") from None  # fmt: skip
        if done.returncode != 0:
            raise FormationError(f"`{' '.join(args[:3])}` failed (exit {done.returncode}); see {log}:\n{tail(log)}")

    def spawn(self, args: Sequence[str], env: dict[str, str], log: Path) -> Keeper:
        """Start a service that outlives this process; its output goes to `log`."""
        command = ["/bin/sh", "-c", _LAUNCH, "sh", self.pg_autoctl, *args[1:]]
        user, group, extra_groups = self._popen_identity()
        done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
                              env={**env, "TICKETIQ_HA_LOG": str(log)}, user=user, group=group,
                              extra_groups=extra_groups)  # fmt: skip
        try:
            pid = int(done.stdout.strip())
            return Keeper(pid, psutil.Process(pid).create_time())
        except (ValueError, psutil.Error) as exc:
            raise FormationError(f"`{' '.join(args[:3])}` did not start ({done.stderr.strip() or exc}); see {log}:\n"
                                 f"{tail(log)}") from exc  # fmt: skip

    def own(self, *paths: Path) -> None:
        """Hand files and folders (not their contents) to the formation's user."""
        if not self.switch:
            return
        for path in paths:
            if path.exists() and (path.stat().st_uid, path.stat().st_gid) != (self.uid, self.gid):
                os.chown(path, self.uid, self.gid)

    def write(self, path: Path, text: str) -> None:
        """Write a file the formation's user owns (a server setting it reads)."""
        scratch = path.with_name(path.name + ".new")
        scratch.write_text(text)
        self.own(scratch)
        scratch.replace(path)


def current_user() -> str:
    return pwd.getpwuid(os.geteuid()).pw_name


def _user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise FormationError(f"the formation's user {name} does not exist on this machine") from None


def ensure_system_user(user: str = SYSTEM_USER) -> pwd.struct_passwd:
    """The system user, made when missing (root only): no login, no home."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        pass
    made = subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", user],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if made.returncode != 0 and "already exists" not in made.stderr:
        raise FormationError(f"could not make the system user {user}: {made.stderr.strip()}")
    return pwd.getpwnam(user)


def make_traversable(path: Path) -> None:
    """Let every user pass through the folders above `path` (o+x, not read): the formation's user must
    reach its folder under, say, /root or pytest's 0700 temporary root."""
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)


def tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _live(proc: psutil.Process) -> bool:
    """Alive and not a zombie (killed, waiting to be reaped: as good as gone)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _names(proc: psutil.Process, uid: int, pgdata: Path, program: str) -> bool:
    """Whether a process is `program` on `pgdata`, run by the formation's user."""
    try:
        cmdline = proc.cmdline()
        return proc.uids().real == uid and bool(cmdline) and program in Path(cmdline[0]).name and str(pgdata) in cmdline
    except psutil.Error:
        return False


def _process(pid: int) -> psutil.Process | None:
    """The process, if `pid` names one. Postgres writes a negative pid in postmaster.pid while it runs as
    a single-user backend (pg_autoctl's crash recovery before pg_rewind): no postmaster."""
    if pid <= 0:
        return None
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def keeper_top(layout: Layout, name: str, recorded: Keeper | None, uid: int) -> psutil.Process | None:
    """The node's live `pg_autoctl run`: the one recorded, else the one pg_autoctl's pid file names."""
    if recorded is not None:
        proc = _process(recorded.pid)
        if proc is not None and _live(proc) and abs(proc.create_time() - recorded.started_at) < 0.01:
            return proc
    pidfile = _keeper_pidfile(layout, name)
    if pidfile is not None:
        proc = _process(pidfile.pid)
        if proc is not None and _live(proc) and _names(proc, uid, layout.pgdata(name), "pg_autoctl"):
            return proc
    return None


def _keeper_pidfile(layout: Layout, name: str) -> KeeperPidfile | None:
    try:
        return parse_keeper_pidfile(layout.keeper_file(name, "pid").read_text())
    except OSError:
        return None


def postmaster(layout: Layout, name: str, uid: int) -> psutil.Process | None:
    try:
        found = parse_pidfile((layout.pgdata(name) / "postmaster.pid").read_text())
    except OSError:
        return None
    proc = None if found is None else _process(found.pid)
    return proc if proc is not None and _live(proc) and _names(proc, uid, layout.pgdata(name), "postgres") else None


# The processes run by the formation's user, by the XDG_RUNTIME_DIR in their environment (one per node).
Runtimes = Mapping[str, Sequence[psutil.Process]]


@dataclass(frozen=True)
class Tree:
    """A node's processes: its `pg_autoctl run` and the services it runs, its postmaster and the
    postmaster's children."""

    keeper: psutil.Process | None  # its live `pg_autoctl run`
    postmaster: psutil.Process | None
    processes: tuple[psutil.Process, ...]  # pg_autoctl's first (`run` leading), then Postgres's

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    @property
    def orphans(self) -> list[psutil.Process]:
        """pg_autoctl's services left running by a `pg_autoctl run` that was killed alone."""
        return [] if self.keeper is not None else [p for p in self.processes if is_pg_autoctl(p)]

    @property
    def process(self) -> Process:
        live = [p for p in self.processes if _live(p)]
        if not live:
            return Process.GONE
        with contextlib.suppress(psutil.Error):
            if any(p.status() == psutil.STATUS_STOPPED for p in live):
                return Process.STOPPED
        return Process.RUNNING


def tree(layout: Layout, name: str, recorded: Keeper | None, uid: int, runtimes: Runtimes | None = None) -> Tree:
    """Every live process of the node: those run by the formation's user with the node's own
    XDG_RUNTIME_DIR in their environment (pg_autoctl's and the postmaster's, whoever their parent is
    now), and the children of its `pg_autoctl run` and of its postmaster (a backend's title overwrites
    the environment it inherited). `runtimes`: one look at every process made for all the nodes of a
    status (`by_runtime`); without it, this node's own look."""
    top = keeper_top(layout, name, recorded, uid)
    pm = postmaster(layout, name, uid)
    seen = runtimes if runtimes is not None else by_runtime(uid)
    found = {p.pid: p for p in seen.get(str(layout.runtime_dir(name)), ())}
    for root in (top, pm):
        with contextlib.suppress(psutil.Error):
            found |= {p.pid: p for p in [root, *root.children(recursive=True)]} if root is not None else {}
    live = [p for p in found.values() if _live(p)]
    # Signals go in this order: the keeper first (so it restarts nothing), the postmaster before its backends.
    rank = {**({top.pid: 0} if top else {}), **({pm.pid: 2} if pm else {})}
    live.sort(key=lambda p: (rank.get(p.pid, 1 if is_pg_autoctl(p) else 3), p.pid))
    return Tree(top, pm, tuple(live))


def by_runtime(uid: int) -> Runtimes:
    """Every process of `uid`, by its XDG_RUNTIME_DIR: a look at each process of the machine (its status
    file, and its environment when it is the user's), which is most of what a status costs on a machine
    running hundreds of other processes. A status makes it once for all its nodes, not once a node."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.uids().real == uid and (runtime := proc.environ().get("XDG_RUNTIME_DIR")) is not None:
                found.setdefault(runtime, []).append(proc)
    return found


def is_pg_autoctl(proc: psutil.Process) -> bool:
    try:
        return proc.name().startswith("pg_autoctl")
    except psutil.Error:
        return False


def send(processes: Iterable[psutil.Process], sig: signal.Signals) -> list[int]:
    """Signal each live one; the pids signalled."""
    sent = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if _live(proc):
                proc.send_signal(sig)
                sent.append(proc.pid)
    return sent


def wait_gone(processes: Iterable[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Wait until none is alive; those still alive when the time is up."""
    waiting = list(processes)
    deadline = time.monotonic() + timeout_s
    while True:
        waiting = [p for p in waiting if _live(p)]
        if not waiting or time.monotonic() >= deadline:
            return waiting
        time.sleep(_POLL_S)
