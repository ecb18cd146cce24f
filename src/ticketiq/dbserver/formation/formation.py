"""A pg_auto_failover formation on 127.0.0.1: one monitor and two Postgres nodes, a primary and its
synchronous standby, under $TICKETIQ_HOME/ha. `up` makes it (once) and starts it, `down` stops what it
started, and `Formation` is what the kill trials drive: which node is primary, each node's processes,
kill, stop and continue them, bring a node back, wait for a primary and for synchronous replication.

Each of the three runs as its own `pg_autoctl run`, started as a service that outlives the command
(its output in ha/logs/<name>.log); the state file (ha/formation.json) keeps the ports, chosen once, and
the pid and start time of each `pg_autoctl run` started. The app connects as `postgres` to the database
`ticketiq`, made on the first primary, by the multi-host URL `up` prints, which carries the formation's
password (`credentials.py`): it listens on 127.0.0.1 only, and asks every local user for that password.

Synchronous, like `embedded.py`: it drives processes and waits, for a command or a trial's thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ticketiq.dbserver.authentication import without_password
from ticketiq.dbserver.formation import credentials, monitor
from ticketiq.dbserver.formation.plan import (
    MONITOR,
    MONITOR_ROLES,
    MONITOR_SETTINGS,
    NODE_ROLES,
    NODE_SETTINGS,
    NODES,
    SYSTEM_USER,
    FormationError,
    Keeper,
    Layout,
    Plan,
    choose_ports,
    config_set_commands,
    create_monitor_command,
    create_node_command,
    initdb_command,
    monitor_url,
    multi_host_url,
    new_plan,
    run_command,
    settings_text,
    with_include,
)
from ticketiq.dbserver.formation.processes import (
    RunAs,
    Runtimes,
    Tree,
    binaries,
    by_runtime,
    current_user,
    is_pg_autoctl,
    make_traversable,
    send,
    tree,
    wait_gone,
)
from ticketiq.dbserver.formation.synchrony import NodeState, NodeView, Process, Synchrony, Verdict, lag_bytes, verdict
from ticketiq.dbserver.ports import ephemeral_floor, port_free

PORT_FLOOR = 20000  # as the embedded server: below the ephemeral range, so no port 0 is handed ours
CREATE_TIMEOUT_S = 120.0  # a node is made from a base backup of the primary: seconds here
STOP_TIMEOUT_S = 20.0  # pg_autoctl's fast shutdown; then SIGKILL
POLL_S = 0.2
PROBE_S = 2.0  # a write that takes longer waits for a standby that is gone


def _layout(home: Path) -> Layout:
    return Layout(home.resolve() / "ha")


@dataclass(frozen=True)
class Node:
    """A node as it is now: its processes here, and the monitor's row (None when it has none)."""

    name: str
    port: int
    pgdata: Path
    process: Process
    keeper_pid: int | None  # its `pg_autoctl run`
    postmaster_pid: int | None
    pids: tuple[int, ...]  # its whole tree
    state: NodeState | None
    lag_bytes: int | None = None  # behind the primary's last reported WAL position

    def to_json(self) -> dict[str, Any]:
        s = self.state
        return {
            "name": self.name, "port": self.port, "process": self.process.value, "keeper_pid": self.keeper_pid,
            "postmaster_pid": self.postmaster_pid, "pids": list(self.pids),
            "reported": s.reported if s else None, "assigned": s.assigned if s else None,
            "health": s.health if s else None, "replication": s.replication if s else None,
            "lsn": s.lsn if s else None, "timeline": s.timeline if s else None,
            "reported_ago_s": round(s.reported_ago_s, 1) if s else None, "lag_bytes": self.lag_bytes,
        }  # fmt: skip


@dataclass(frozen=True)
class Status:
    url: str  # without its password: a status is printed (`Formation.url` has it)
    monitor: Node
    nodes: tuple[Node, ...]
    verdict: Verdict | None  # None: the monitor did not answer
    monitor_error: str | None = None
    number_sync_standbys: int | None = None

    @property
    def up(self) -> bool:
        return self.verdict is not None

    def to_json(self) -> dict[str, Any]:
        v = self.verdict
        return {
            "up": self.up, "url": self.url, "monitor": self.monitor.to_json(), "monitor_error": self.monitor_error,
            "number_sync_standbys": self.number_sync_standbys,
            "synchrony": v.synchrony.value if v else None, "message": v.message if v else None,
            "why": v.why if v else None, "primary": v.primary if v else None, "standby": v.standby if v else None,
            "nodes": [n.to_json() for n in self.nodes],
        }  # fmt: skip


@dataclass
class Formation:
    """A formation made by `up`, as the kill trials drive it: `Formation.load(home)`, then `status()`,
    `nodes()`, `primary()`, `pids(name)`, `kill(name)`, `stop(name)` / `cont(name)`, `start(name)`,
    `restart(name)`, `wait_primary()`, `wait_synchronous()`; `url` is the app's multi-host URL. Names are
    "node1", "node2" and "monitor". Every wait is bounded and raises FormationError when out of time."""

    layout: Layout
    plan: Plan
    run_as: RunAs
    bin_dir: Path  # the Postgres whose pgautofailover extension is installed
    say: Callable[[str], None] = field(default=lambda line: None)

    @classmethod
    def load(cls, home: Path, say: Callable[[str], None] | None = None) -> Formation:
        """The formation of $TICKETIQ_HOME `home`; FormationError when none was made there."""
        layout = _layout(home)
        try:
            plan = Plan.from_json(layout.state_file.read_text())
        except FileNotFoundError:
            raise FormationError(f"no formation in {layout.root}: `ticketiq db ha up` makes one") from None
        pg_autoctl, bin_dir = binaries()
        return cls(layout, plan, RunAs.for_plan(plan.user, pg_autoctl), bin_dir, say or (lambda line: None))

    @property
    def password(self) -> str | None:
        """The formation's password (None: made before passwords, it trusts until its next `up`)."""
        return credentials.password(self.layout)

    @property
    def url(self) -> str:
        """The app's URL, with the password: never print it but on purpose (`up`'s last line)."""
        return multi_host_url(self.plan.node_ports.values(), self.password)

    @property
    def monitor_url(self) -> str:
        return monitor_url(self.plan.monitor_port, self.password)

    def _env(self, name: str) -> dict[str, str]:
        return self.layout.environment(name, self.bin_dir, _lang())

    # ----- looking ---------------------------------------------------------------------------------

    def tree(self, name: str, runtimes: Runtimes | None = None) -> Tree:
        return tree(self.layout, name, self.plan.keepers.get(name), self.run_as.uid, runtimes)

    def pids(self, name: str) -> list[int]:
        """Every pid of the node's (or the monitor's) tree: its pg_autoctl processes, its postmaster and
        the postmaster's children."""
        return self.tree(name).pids

    def _node(self, name: str, state: NodeState | None, runtimes: Runtimes) -> Node:
        found = self.tree(name, runtimes)
        return Node(name, self.plan.ports[name], self.layout.pgdata(name), found.process,
                    found.keeper.pid if found.keeper else None, found.postmaster.pid if found.postmaster else None,
                    tuple(found.pids), state)  # fmt: skip

    def status(self) -> Status:
        runtimes = by_runtime(self.run_as.uid)  # one look at the machine's processes for every node
        mon = self._node(MONITOR, None, runtimes)
        try:
            states = {s.name: s for s in monitor.node_states(self.monitor_url)}
        except FormationError as exc:
            nodes = tuple(self._node(name, None, runtimes) for name in NODES)
            return Status(without_password(self.url), mon, nodes, None, monitor_error=str(exc))
        nodes = tuple(self._node(name, states.get(name), runtimes) for name in NODES)
        found = verdict([NodeView(n.state, n.process) for n in nodes if n.state is not None])
        primary = next((n for n in nodes if n.name == found.primary), None)
        if primary is not None and primary.state is not None:
            lead = primary.state.lsn
            nodes = tuple(_with_lag(n, lead) for n in nodes)
        return Status(without_password(self.url), mon, nodes, found,
                      number_sync_standbys=monitor.number_sync_standbys(self.monitor_url))  # fmt: skip

    def nodes(self) -> tuple[Node, ...]:
        return self.status().nodes

    def primary(self) -> Node | None:
        """The node that takes writes now, by the monitor and the processes here (None during a failover)."""
        now = self.status()
        if now.verdict is None or now.verdict.primary is None:
            return None
        return next(n for n in now.nodes if n.name == now.verdict.primary)

    # ----- acting on a node ---------------------------------------------------------------------------

    def kill(self, name: str, timeout_s: float = 10.0) -> list[int]:
        """SIGKILL the node's whole tree at once, its keeper first (so it restarts nothing); return the
        pids once all are gone. The machine the node ran on died, as far as the others can tell."""
        found = self.tree(name)
        killed = send(found.processes, signal.SIGKILL)
        left = wait_gone(found.processes, timeout_s)
        if left:
            raise FormationError(f"{name}: pids {[p.pid for p in left]} outlived SIGKILL for {timeout_s:g} s")
        return killed

    def stop(self, name: str) -> list[int]:
        """SIGSTOP the node's tree, its keeper first: it serves nothing and reports nothing, as a frozen
        machine. `cont` wakes it."""
        return send(self.tree(name).processes, signal.SIGSTOP)

    def cont(self, name: str) -> list[int]:
        """SIGCONT the node's tree, its Postgres first, so its keeper wakes to a server that answers."""
        return send(reversed(self.tree(name).processes), signal.SIGCONT)

    def start(self, name: str) -> Keeper:
        """Start the node's `pg_autoctl run` (not waiting for anything); FormationError when it runs."""
        found = self.tree(name)
        if found.keeper is not None:
            raise FormationError(f"{name}'s pg_autoctl is running already")
        # The services a keeper killed alone left would go on beside the new ones; its postmaster, left
        # serving, is adopted by the new keeper rather than restarted.
        send(found.orphans, signal.SIGKILL)
        wait_gone(found.orphans, 10)
        keeper = self.run_as.spawn(run_command(self.layout, name), self._env(name), self.layout.log(name))
        self._record(name, keeper)
        return keeper

    def restart(self, name: str, timeout_s: float = 60.0) -> Status:
        """Bring a killed node back: start its `pg_autoctl run` again and wait until the formation is
        synchronous again (it rejoins as the standby, rewound if it was the primary)."""
        self.start(name)
        return self.wait_synchronous(timeout_s)

    # ----- waiting ------------------------------------------------------------------------------------

    def wait_primary(self, timeout_s: float = 30.0) -> Node:
        """Wait until some node is settled primary (or wait_primary) and a write through the URL commits
        on it; return it. FormationError when none does within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        last = "nothing seen yet"
        while time.monotonic() < deadline:
            now = self.status()
            if now.verdict is not None and now.verdict.primary is not None:
                port = monitor.write_port(self.url, min(PROBE_S, max(0.1, deadline - time.monotonic())))
                took = next((n for n in now.nodes if n.port == port), None)
                if took is not None:
                    return took
                last = f"{now.verdict.primary} is primary, but the URL took no write"
            else:
                last = now.monitor_error or (now.verdict.why if now.verdict else "")
            time.sleep(POLL_S)
        raise FormationError(f"no node took writes within {timeout_s:g} s ({last})")

    def wait_synchronous(self, timeout_s: float = 60.0) -> Status:
        """Wait until a primary's commits wait for a standby (and a write commits so); return the status."""
        deadline = time.monotonic() + timeout_s
        now = self.status()
        while time.monotonic() < deadline:
            now = self.status()
            v = now.verdict
            if v is not None and v.synchrony is Synchrony.SYNCHRONOUS and monitor.write_port(self.url, PROBE_S):
                return now
            time.sleep(POLL_S)
        seen = now.monitor_error or (now.verdict.message + f" ({now.verdict.why})" if now.verdict else "")
        raise FormationError(f"the formation was not synchronous within {timeout_s:g} s: {seen}; logs in "
                             f"{self.layout.logs}")  # fmt: skip

    def _wait_monitor(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                monitor.node_states(self.monitor_url)
                return
            except FormationError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_S)

    def _wait_reported(self, name: str, states: tuple[str, ...], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(FormationError):
                rows = {s.name: s for s in monitor.node_states(self.monitor_url)}
                if name in rows and rows[name].reported in states and rows[name].reported == rows[name].assigned:
                    return
            time.sleep(POLL_S)
        raise FormationError(f"{name} did not reach {' or '.join(states)} within {timeout_s:g} s; see "
                             f"{self.layout.log(name)}")  # fmt: skip

    # ----- making and starting ------------------------------------------------------------------------

    def _record(self, name: str, keeper: Keeper | None) -> None:
        """Record a started (or stopped) keeper in the state file, under the lock."""
        with _locked(self.layout):
            try:
                on_disk = Plan.from_json(self.layout.state_file.read_text())
            except FileNotFoundError:
                on_disk = self.plan
            self.plan = on_disk.with_keeper(name, keeper)
            _save(self.layout, self.plan)

    def _made(self, name: str) -> bool:
        """Whether pg_autoctl finished making it. A make that was cut short left its init file (or only
        a data folder): pg_autoctl's `create` picks an init file up where it stopped."""
        layout = self.layout
        if layout.keeper_file(name, "cfg").exists() and not layout.keeper_file(name, "init").exists():
            return (layout.pgdata(name) / "PG_VERSION").exists()
        if layout.pgdata(name).exists() and not layout.keeper_file(name, "init").exists():
            raise FormationError(f"{layout.pgdata(name)} was left half made: `ticketiq db ha down --purge`, then "
                                 "`ticketiq db ha up`")  # fmt: skip
        return False

    def _tune(self, name: str) -> None:
        """Our server settings (included after pg_autoctl's own) and, for a node, its keeper's timeouts;
        written at every start, so a changed generator takes effect at the next `up`."""
        pgdata = self.layout.pgdata(name)
        self.run_as.write(
            pgdata / "ticketiq.conf", settings_text(MONITOR_SETTINGS if name == MONITOR else NODE_SETTINGS)
        )
        included = with_include((pgdata / "postgresql.conf").read_text())
        if included is not None:
            self.run_as.write(pgdata / "postgresql.conf", included)
        if name != MONITOR:
            for command in config_set_commands(self.layout, name):
                self.run_as.run(command, self._env(name), self.layout.log("create"), timeout_s=30)

    def _bring_up(self, name: str) -> None:
        """Make it if it was never made, tune it, and start its `pg_autoctl run` unless it runs."""
        found = self.tree(name)
        port = self.plan.ports[name]
        if found.keeper is None and found.postmaster is None and not port_free(port):
            # Its keeper would retry starting Postgres for ever; better to say now what is wrong.
            raise FormationError(
                f"port {port}, which {name} keeps (in {self.layout.state_file}), is in use by another program: stop "
                "that program, or `ticketiq db ha down --purge` and `up` for new ports"
            )
        made = False
        if not self._made(name):
            self.say(f"making {name} (port {self.plan.ports[name]}) ...")
            pg_ctl = self.bin_dir / "pg_ctl"
            if name != NODES[1]:  # the second node is the first's base backup, its pg_hba.conf with it
                self._initdb(name)
            if name == MONITOR:
                command = create_monitor_command(self.layout, pg_ctl, self.plan.monitor_port)
            else:
                command = create_node_command(self.layout, pg_ctl, name, self.plan.ports[name], self.plan.monitor_port)
            self.run_as.run(command, self._env(name), self.layout.log("create"), timeout_s=CREATE_TIMEOUT_S)
            self._clear_leftovers(name)
            made = name != NODES[1]
        if self.tree(name).keeper is None:
            self._tune(name)
            self.start(name)
            self.say(f"started {name}'s pg_autoctl (pid {self.plan.keepers[name].pid}; log {self.layout.log(name)})")
        if made:
            # Before anything reaches it over TCP: the nodes' keepers reach the monitor as autoctl_node, the
            # second node's base backup reads the first as pgautofailover_replicator, the app connects.
            password = self.password
            assert password is not None  # kept by _prepare_folders
            roles = MONITOR_ROLES if name == MONITOR else NODE_ROLES
            credentials.give_passwords(self.layout, self.run_as, self.plan.ports[name], roles, password)

    def _initdb(self, name: str) -> None:
        """The server's data folder with our pg_hba.conf, before pg_autoctl starts it: it never trusts over
        TCP (pg_autoctl's own initdb trusts 127.0.0.1, and its lines come after initdb's)."""
        pgdata = self.layout.pgdata(name)
        if not (pgdata / "PG_VERSION").exists():
            command = initdb_command(self.layout, self.bin_dir, name)
            self.run_as.run(command, self._env(name), self.layout.log("create"), timeout_s=CREATE_TIMEOUT_S)
        credentials.write_hba(self.layout, self.run_as, name)

    def _clear_leftovers(self, name: str) -> None:
        """`pg_autoctl create` runs its own services and, now and then under load, exits before its
        start/stop-postgres service does. Left running, that one would start Postgres again behind the
        keeper's back (seen: after `down`). No keeper runs yet, so every pg_autoctl of the node is one."""
        leftovers = [p for p in self.tree(name).processes if is_pg_autoctl(p)]
        send(leftovers, signal.SIGTERM)
        send(wait_gone(leftovers, 10), signal.SIGKILL)

    def _secure(self, now: Status) -> Status:
        """The servers ask for the formation's password from now on (`credentials.secure`), once every
        process of the formation was started with its passfile; else it is said what to do."""
        # The keepers and postmasters (their children inherit theirs; a backend's title overwrites the
        # environment it inherited, so it cannot be read there).
        tops = [self.tree(name) for name in (MONITOR, *NODES)]
        stale = credentials.without_passfile([p for t in tops for p in (t.keeper, t.postmaster) if p], self.layout)
        if stale:
            self.say(f"the formation still lets every local user in: its processes {stale} were started before it "
                     "had a password; `ticketiq db ha down`, then `ticketiq db ha up`, moves it to one")  # fmt: skip
            return now
        primary = now.verdict.primary if now.verdict is not None else None
        if primary is None:
            raise FormationError("no primary to give the roles their password: the formation is not up")
        password = self.password
        assert password is not None  # kept by _prepare_folders
        self.say("giving every role the formation's password; pg_hba.conf asks for it over TCP ...")
        credentials.secure(self.layout, self.run_as, self.plan.ports, primary, password)
        return self.wait_synchronous(60.0)

    def _prepare_folders(self) -> None:
        layout = self.layout
        folders = [layout.root, layout.logs, layout.sockets, layout.root / "xdg"]
        for name in (MONITOR, *NODES):
            folders += [layout.xdg(name), *(layout.xdg(name) / kind for kind in ("config", "data", "run"))]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
        for name in (MONITOR, *NODES):
            layout.runtime_dir(name).chmod(0o700)  # an XDG_RUNTIME_DIR must be its user's alone
        if self.run_as.switch:
            make_traversable(layout.root)
            make_traversable(layout.sockets)
            self.run_as.own(*folders)
            for name in ("create", MONITOR, *NODES):
                layout.log(name).touch()
                self.run_as.own(layout.log(name))
        credentials.private_sockets(layout, self.run_as)
        credentials.keep_passfile(layout, self.run_as)


@dataclass(frozen=True)
class Up:
    url: str
    seconds: float
    already: bool  # it was up and synchronous before this `up`
    status: Status


def up(home: Path, timeout_s: float = 120.0, say: Callable[[str], None] | None = None) -> Up:
    """Make the formation if needed, start whatever of it is not running and wait until its primary's
    commits wait for the standby. Idempotent: a formation already up is only looked at."""
    began = time.monotonic()
    pg_autoctl, bin_dir = binaries()
    layout = _layout(home)
    with _locked(layout, "run"):
        plan = _plan(layout)
        formation = Formation(layout, plan, RunAs.for_plan(plan.user, pg_autoctl), bin_dir, say or (lambda line: None))
        now = formation.status()
        running = all(n.process is Process.RUNNING for n in (now.monitor, *now.nodes))
        synchronous = now.verdict is not None and now.verdict.synchrony is Synchrony.SYNCHRONOUS
        if running and synchronous and credentials.secured(layout):
            return Up(formation.url, time.monotonic() - began, True, now)
        formation._prepare_folders()
        formation._bring_up(MONITOR)
        formation._wait_monitor(timeout_s)
        first, second = NODES
        formation._bring_up(first)
        if not formation._made(second):
            # The standby is made from the primary's base backup: the primary must be serving first.
            formation._wait_reported(first, ("single", "wait_primary", "primary"), timeout_s)
        formation._bring_up(second)
        formation.say("waiting for the primary and its synchronous standby ...")
        status = formation.wait_synchronous(max(1.0, timeout_s - (time.monotonic() - began)))
        if not credentials.secured(layout):
            status = formation._secure(status)
        return Up(formation.url, time.monotonic() - began, False, status)


def _plan(layout: Layout) -> Plan:
    """The state file's plan; the first time, a new one with free ports, saved before anything is made."""
    with _locked(layout):
        try:
            return Plan.from_json(layout.state_file.read_text())
        except FileNotFoundError:
            pass
        floor = PORT_FLOOR if ephemeral_floor() > PORT_FLOOR + 1000 else 1024
        candidates = random.sample(range(floor, max(floor + 1000, ephemeral_floor())), 200)
        plan = new_plan(SYSTEM_USER if os.geteuid() == 0 else current_user(), choose_ports(3, candidates, port_free))
        _save(layout, plan)
        return plan


@dataclass(frozen=True)
class Down:
    stopped: dict[str, list[int]]  # name -> the pids that were running
    purged: bool
    root: Path


def down(home: Path, purge: bool = False, timeout_s: float = STOP_TIMEOUT_S) -> Down:
    """Stop the formation's processes (the nodes, then the monitor), leaving its data for the next `up`;
    `purge` deletes the data too. Only processes shown to be the formation's are signalled."""
    layout = _layout(home)
    if not layout.state_file.exists():
        if purge and layout.root.exists():
            shutil.rmtree(layout.root)
            return Down({}, True, layout.root)
        return Down({}, False, layout.root)
    with _locked(layout, "run"):
        formation = Formation.load(home)
        stopped = {name: _stop(formation, name, timeout_s) for name in NODES}
        stopped[MONITOR] = _stop(formation, MONITOR, timeout_s)
        for name in (MONITOR, *NODES):
            formation._record(name, None)
    if purge:
        sockets = layout.sockets
        shutil.rmtree(layout.root)
        if not sockets.is_relative_to(layout.root):
            shutil.rmtree(sockets, ignore_errors=True)
    return Down({k: v for k, v in stopped.items() if v}, purge, layout.root)


def _stop(formation: Formation, name: str, timeout_s: float) -> list[int]:
    """Stop every process of the node: SIGTERM to its `pg_autoctl run` (which stops its Postgres, fast,
    and exits); without one, SIGTERM to the services it left and SIGINT (Postgres's fast shutdown) to the
    postmaster. The node is looked at again until nothing of it is left, so a process started meanwhile
    is stopped too; what is still there after `timeout_s` is SIGKILLed. Returns every pid it saw."""
    seen: dict[int, None] = {}
    asked: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while True:
        found = formation.tree(name)
        if not found.processes:
            return list(seen)
        seen |= dict.fromkeys(found.pids)
        if time.monotonic() > deadline + 10:
            raise FormationError(f"{name}: pids {found.pids} are still running after SIGKILL")
        send(found.processes, signal.SIGCONT)  # a stopped (SIGSTOPped) process would not act on a signal
        if time.monotonic() > deadline:
            send(found.processes, signal.SIGKILL)
        elif found.keeper is not None:
            asked |= set(send([p for p in [found.keeper] if p.pid not in asked], signal.SIGTERM))
        else:
            asked |= set(send([p for p in found.orphans if p.pid not in asked], signal.SIGTERM))
            postmaster = [p for p in [found.postmaster] if p is not None and p.pid not in asked]
            asked |= set(send(postmaster, signal.SIGINT))
        wait_gone(found.processes, 0.5)


def _with_lag(node: Node, primary_lsn: str) -> Node:
    if node.state is None:
        return node
    return Node(node.name, node.port, node.pgdata, node.process, node.keeper_pid, node.postmaster_pid, node.pids,
                node.state, lag_bytes(primary_lsn, node.state.lsn))  # fmt: skip


def _save(layout: Layout, plan: Plan) -> None:
    scratch = layout.state_file.with_name(layout.state_file.name + ".new")
    scratch.write_text(plan.to_json())
    scratch.replace(layout.state_file)


@contextlib.contextmanager
def _locked(layout: Layout, lock: str = "state") -> Iterator[None]:
    """One of the formation's locks: `state` while its state file is read and written, `run` for the
    whole of an `up` or a `down` (two at once would make or stop the same servers twice)."""
    layout.root.mkdir(parents=True, exist_ok=True)
    with open(layout.root / f"{lock}.lock", "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lang() -> str:
    # initdb takes the locale from LANG: one every Debian system has.
    return "C.UTF-8"
