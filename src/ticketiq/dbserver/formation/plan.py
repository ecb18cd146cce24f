"""The formation's plan, as pure functions of plain data: where its files live, which ports it keeps,
the URLs it is reached by, the server settings and keeper timeouts it runs with, and the `pg_autoctl`
commands that make and run it. `formation.py` carries them out; nothing here touches a process or a
socket.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from ticketiq.dbserver.authentication import METHOD, with_password
from ticketiq.errors import TicketIQError

MONITOR = "monitor"
NODES = ("node1", "node2")
HOST = "127.0.0.1"
APP_ROLE = "postgres"  # the role the app connects as: the superuser, as on the embedded server
REPLICATION_ROLE = "pgautofailover_replicator"  # pg_autoctl's: a standby streams (and pg_rewind reads) as it
HEALTH_ROLE = "pgautofailover_monitor"  # pg_autoctl's: the monitor's health checks; its password is public
APP_DATABASE = "ticketiq"  # storage.database.APP_DATABASE, made on the first primary by pg_autoctl
MONITOR_ROLE = "autoctl_node"  # pg_autoctl's own role on the monitor; it may read the node table
MONITOR_DATABASE = "pg_auto_failover"
SYSTEM_USER = "ticketiq-pg"  # as root, pg_autoctl and Postgres run as this user (both refuse root)
# A Unix socket's path holds at most 107 bytes, and Postgres adds `/.s.PGSQL.<port>` to the folder.
_SOCKET_PATH_MAX = 107 - len("/.s.PGSQL.65535")
STATE_VERSION = 1

# Memory for a small machine: pg_autoctl sizes shared_buffers and friends from the host's memory (a
# quarter of it, gigabytes on a large host) in its own postgresql-auto-failover.conf; `ticketiq.conf`
# is included after it and wins. max_connections: two app processes with pools of up to 20 and their
# dedicated connections, the tests' own, and headroom; a standby needs at least its primary's value.
NODE_SETTINGS: Mapping[str, str] = {
    "shared_buffers": "48MB",
    "max_connections": "100",
    "work_mem": "4MB",
    "maintenance_work_mem": "32MB",
    "effective_cache_size": "256MB",
    # pg_autoctl keeps 8 GB of WAL for a standby that falls behind; its replication slots already keep
    # what a known standby still needs.
    "wal_keep_size": "256MB",
}
# The monitor checks every node each second (one connect, 1 s to answer, one retry 0.2 s later) and calls
# a node unhealthy after 3 s without a report; a primary that cannot be reached is given 6 s to demote
# itself before its standby is promoted. The defaults (5 s checks, 20 s, 30 s) stop writes for ~50 s.
# Right after the monitor starts it waits this grace before any failover (default 10 s); 3 s is enough
# for the keepers, which report every second, to be heard.
MONITOR_SETTINGS: Mapping[str, str] = {
    "shared_buffers": "16MB",
    "max_connections": "50",
    "work_mem": "2MB",
    "maintenance_work_mem": "16MB",
    "effective_cache_size": "64MB",
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "200",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "6000",
    "pgautofailover.startup_grace_period": "3000",
}
# Each keeper's [timeout] section (`pg_autoctl config get` lists it). A primary that reaches neither the
# monitor nor its standby for 3 s demotes itself (default 20 s): it can no longer be the one that leads.
# A standby being promoted waits 1 s, not 5, for its WAL receiver to stop. A primary's Postgres that
# cannot be started again for 5 s (default 20 s; or 3 tries) is reported down so the monitor fails over.
# prepare_promotion_catchup (30 s) is left: with a synchronous standby there is nothing to catch up, and
# a lagging standby should not be promoted early. The citus_* and listen_notifications_* keys do not
# apply to a plain formation.
KEEPER_TIMEOUTS: Mapping[str, str] = {
    "timeout.network_partition_timeout": "3",
    "timeout.prepare_promotion_walreceiver": "1",
    "timeout.postgresql_restart_failure_timeout": "5",
    "timeout.postgresql_restart_failure_max_retries": "3",
}
# The roles that connect over TCP, each with the formation's password, on the server that keeps them.
MONITOR_ROLES = (MONITOR_ROLE,)
NODE_ROLES = (APP_ROLE, REPLICATION_ROLE)
# Every server's pg_hba.conf, written in place of initdb's (pg_autoctl 2.0 runs initdb --auth=trust, so
# its `host all all 127.0.0.1/32 trust` came first and let every local user in as anyone, whatever
# --auth said) and of pg_autoctl's own lines (which it appends again now and then: below these, they
# never match). Over TCP every role gives the formation's password, except pg_autoctl's health-check
# role, refused: an answer of any kind is what the monitor's check looks for, and that role's password is
# the same on every pg_auto_failover installation. The Unix sockets need none: their folder is the
# formation user's alone (0700), as pg_autoctl's connections to its own Postgres and ours as root are.
HBA_TEXT = f"""# Written by `ticketiq db ha up` (dbserver/formation/plan.py): edit the generator.
local   all           all                                    trust
local   replication   all                                    trust
host    all           {HEALTH_ROLE}   127.0.0.1/32    reject
host    all           all                      127.0.0.1/32    {METHOD}
host    replication   all                      127.0.0.1/32    {METHOD}
"""
PASSFILE = "pgpass"
SETTINGS_FILE = "ticketiq.conf"
INCLUDE_LINE = f"include '{SETTINGS_FILE}'  # ticketiq: after pg_autoctl's own includes, so its settings win"


class FormationError(TicketIQError):
    """The formation could not be made, started, stopped or read; the message says what to do."""


@dataclass(frozen=True)
class Layout:
    """Where everything of a formation lives: under `root` ($TICKETIQ_HOME/ha, resolved). pg_autoctl
    keeps its own files under XDG folders named after each data folder's absolute path, so the folder
    cannot be moved once made."""

    root: Path

    @property
    def state_file(self) -> Path:
        return self.root / "formation.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def passfile(self) -> Path:
        """libpq's password file of the formation (PGPASSFILE of its processes), 0600, its user's: the
        formation's password, for pg_autoctl's connections to the monitor, pg_basebackup, pg_rewind and a
        standby's stream, so it is on no command line, in no environment and in no pg_autoctl file."""
        return self.root / PASSFILE

    def log(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pgdata(self, name: str) -> Path:
        return self.root / name

    def xdg(self, name: str) -> Path:
        """The node's own XDG folders, where pg_autoctl keeps its configuration, state and pid files. Its
        own, so that XDG_RUNTIME_DIR in a process's environment (pg_autoctl's, and Postgres's that inherit
        it) says which node the process belongs to."""
        return self.root / "xdg" / name

    def runtime_dir(self, name: str) -> Path:
        return self.xdg(name) / "run"

    @property
    def sockets(self) -> Path:
        return socket_dir(self.root)

    def keeper_file(self, name: str, kind: str) -> Path:
        """pg_autoctl's file of one node: `cfg` (its configuration), `state`, `init` (there while it is
        being made), `pid` (the running service's pids)."""
        folder = {"cfg": "config", "state": "data", "init": "data", "pid": "run"}[kind]
        return self.xdg(name) / folder / "pg_autoctl" / str(self.pgdata(name)).lstrip("/") / f"pg_autoctl.{kind}"

    def environment(self, name: str, bin_dir: Path, lang: str) -> dict[str, str]:
        """The whole environment of the node's pg_autoctl (none of the caller's PG* settings leak in). Its
        sockets go to a folder of ours (PG_REGRESS_SOCK_DIR becomes Postgres's -k), not /var/run/postgresql."""
        return {
            "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.root),
            "LANG": lang,
            "XDG_CONFIG_HOME": str(self.xdg(name) / "config"),
            "XDG_DATA_HOME": str(self.xdg(name) / "data"),
            "XDG_RUNTIME_DIR": str(self.runtime_dir(name)),
            "PGHOST": str(self.sockets),
            "PG_REGRESS_SOCK_DIR": str(self.sockets),
            "PGPASSFILE": str(self.passfile),
        }


def socket_dir(root: Path) -> Path:
    """The folder of the servers' Unix sockets: in the formation's folder when its path is short
    enough, else one in /tmp named after it."""
    inside = root / "sockets"
    if len(str(inside).encode()) <= _SOCKET_PATH_MAX:
        return inside
    return Path("/tmp") / f"ticketiq-ha-{hashlib.sha256(str(root).encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class Keeper:
    """A `pg_autoctl run` this formation started: its pid and when it started (seconds since the epoch,
    as the kernel says), so that a pid taken by another process since is never signalled."""

    pid: int
    started_at: float


@dataclass(frozen=True)
class Plan:
    """What the state file keeps: the ports, chosen once, and the keepers running now."""

    user: str  # the user it runs as: the system user when `up` ran as root, else whoever ran it
    monitor_port: int
    node_ports: Mapping[str, int]
    keepers: Mapping[str, Keeper] = field(default_factory=dict)

    @property
    def ports(self) -> dict[str, int]:
        return {MONITOR: self.monitor_port, **self.node_ports}

    def with_keeper(self, name: str, keeper: Keeper | None) -> Plan:
        keepers = {k: v for k, v in self.keepers.items() if k != name}
        if keeper is not None:
            keepers[name] = keeper
        return replace(self, keepers=keepers)

    def to_json(self) -> str:
        keepers = {name: {"pid": k.pid, "started_at": k.started_at} for name, k in self.keepers.items()}
        return json.dumps({"version": STATE_VERSION, "user": self.user, "monitor_port": self.monitor_port,
                           "node_ports": dict(self.node_ports), "keepers": keepers}, indent=2) + "\n"  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """Raises FormationError for a file this version cannot read."""
        try:
            data = json.loads(text)
            if data.get("version") != STATE_VERSION:
                raise ValueError(f"version {data.get('version')!r}, not {STATE_VERSION}")
            keepers = {name: Keeper(int(k["pid"]), float(k["started_at"])) for name, k in data["keepers"].items()}
            node_ports = {str(name): int(port) for name, port in data["node_ports"].items()}
            if tuple(node_ports) != NODES:
                raise ValueError(f"nodes {', '.join(node_ports)}, not {', '.join(NODES)}")
            if not isinstance(data["user"], str):
                raise ValueError(f"user {data['user']!r}")
            return cls(data["user"], int(data["monitor_port"]), node_ports, keepers)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise FormationError(f"the formation's state file is unreadable ({exc})") from exc


def choose_ports(count: int, candidates: Iterable[int], free: Callable[[int], bool]) -> tuple[int, ...]:
    """The first `count` distinct candidates that are free; raises FormationError when there are fewer."""
    chosen: list[int] = []
    for port in candidates:
        if port not in chosen and free(port):
            chosen.append(port)
            if len(chosen) == count:
                return tuple(chosen)
    raise FormationError(f"found {len(chosen)} free ports of the {count} the formation needs")


def new_plan(user: str, ports: tuple[int, ...]) -> Plan:
    monitor_port, *node_ports = ports
    return Plan(user, monitor_port, dict(zip(NODES, node_ports, strict=True)))


def multi_host_url(node_ports: Iterable[int], password: str | None) -> str:
    """The app's URL: every node, in a fixed order; libpq (and psycopg) tries each in turn and keeps the
    one that takes writes, so the URL stays good across failovers. With the formation's password (None:
    a formation made before passwords, which trusts)."""
    hosts = ",".join(f"{HOST}:{port}" for port in node_ports)
    return _with(f"postgresql://{APP_ROLE}@{hosts}/{APP_DATABASE}?target_session_attrs=read-write", password)


def node_url(port: int, password: str | None, database: str = APP_DATABASE) -> str:
    return _with(f"postgresql://{APP_ROLE}@{HOST}:{port}/{database}", password)


def monitor_url(port: int, password: str | None = None) -> str:
    """The monitor's database as pg_autoctl's role. Without a password, as the nodes are given it
    (`--monitor`): theirs is in the passfile."""
    return _with(f"postgresql://{MONITOR_ROLE}@{HOST}:{port}/{MONITOR_DATABASE}?sslmode=disable", password)


def _with(url: str, password: str | None) -> str:
    return url if password is None else with_password(url, password)


def passfile_text(password: str) -> str:
    """The passfile's lines: the formation's password for each of its roles, on any host, port and database
    (replication connections included)."""
    return "".join(f"*:*:*:{role}:{password}\n" for role in (*MONITOR_ROLES, *NODE_ROLES))


def password_in(passfile: str) -> str | None:
    """The formation's password, as `passfile_text` wrote it; None when it holds none."""
    for line in passfile.splitlines():
        fields = line.split(":")
        if len(fields) == 5 and fields[3] in NODE_ROLES and fields[4]:
            return fields[4]
    return None


def settings_text(settings: Mapping[str, str]) -> str:
    """The text of `ticketiq.conf`."""
    lines = ["# Written by `ticketiq db ha up` (dbserver/formation/plan.py) at every start: edit the generator."]
    lines += [f"{name} = '{value}'" for name, value in settings.items()]
    return "\n".join(lines) + "\n"


def with_include(postgresql_conf: str) -> str | None:
    """postgresql.conf with our include as its last line, or None when it is there already."""
    if any(line.strip().startswith(f"include '{SETTINGS_FILE}'") for line in postgresql_conf.splitlines()):
        return None
    return postgresql_conf.rstrip("\n") + "\n" + INCLUDE_LINE + "\n"


def initdb_command(layout: Layout, bin_dir: Path, name: str) -> list[str]:
    """The data folder of the monitor or the first node, made before `pg_autoctl create` (which takes a
    folder it finds stopped as its own, as if it had made it): so that `HBA_TEXT` is in place before its
    server first listens. Made as pg_autoctl would (its `pg_ctl initdb --option --auth=trust`; the locale
    from LANG): the trust lines never serve, HBA_TEXT replaces them at once."""
    return [str(bin_dir / "initdb"), "--pgdata", str(layout.pgdata(name)), "--auth=trust", "--no-instructions"]


def create_monitor_command(layout: Layout, pg_ctl: Path, port: int) -> list[str]:
    # scram-sha-256: pg_autoctl's own lines in pg_hba.conf ask for a password (below HBA_TEXT they never
    # match), and password_encryption is set to match.
    return ["pg_autoctl", "create", "monitor", "--pgdata", str(layout.pgdata(MONITOR)), "--pgport", str(port),
            "--pgctl", str(pg_ctl), "--hostname", HOST, "--listen", HOST, "--auth", METHOD, "--no-ssl"]  # fmt: skip


def create_node_command(layout: Layout, pg_ctl: Path, name: str, port: int, monitor_port: int) -> list[str]:
    """The first node made becomes the primary; the second is made from its base backup. Both take part
    in the replication quorum with the same priority, so either may be promoted, and with the formation's
    number_sync_standbys left at 0 the primary's commits wait for the standby while it is there. The
    monitor's URL carries no password: pg_autoctl keeps it in its configuration file, and libpq finds the
    password in the passfile."""
    return ["pg_autoctl", "create", "postgres", "--pgdata", str(layout.pgdata(name)), "--pgport", str(port),
            "--pgctl", str(pg_ctl), "--hostname", HOST, "--listen", HOST, "--name", name,
            "--username", APP_ROLE, "--dbname", APP_DATABASE, "--monitor", monitor_url(monitor_port),
            "--auth", METHOD, "--no-ssl", "--replication-quorum", "true", "--candidate-priority", "50"]  # fmt: skip


def config_set_commands(layout: Layout, name: str) -> list[list[str]]:
    pgdata = str(layout.pgdata(name))
    return [["pg_autoctl", "config", "set", "--pgdata", pgdata, key, value] for key, value in KEEPER_TIMEOUTS.items()]


def run_command(layout: Layout, name: str) -> list[str]:
    return ["pg_autoctl", "run", "--pgdata", str(layout.pgdata(name))]


@dataclass(frozen=True)
class KeeperPidfile:
    """What pg_autoctl's pid file says: the `pg_autoctl run` process and its services."""

    pid: int
    pgdata: str
    services: Mapping[str, int]


def parse_keeper_pidfile(text: str) -> KeeperPidfile | None:
    """Line 1 the pid of `pg_autoctl run`, line 2 its data folder, then its version, its extension's
    version and a semaphore id, then one `<pid> <service>` line a service. None when garbled."""
    lines = text.splitlines()
    try:
        pid = int(lines[0])
        pgdata = lines[1].strip()
    except (IndexError, ValueError):
        return None
    services: dict[str, int] = {}
    for line in lines[5:]:
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit():
            services[parts[1]] = int(parts[0])
    return KeeperPidfile(pid, pgdata, services)


def postgres_bin_dir(found: Iterable[Path]) -> Path | None:
    """Of /usr/lib/postgresql/<major>/lib/pgautofailover.so files, the bin folder of the newest major."""
    majors = [(int(p.parents[1].name), p.parents[1] / "bin") for p in found if p.parents[1].name.isdigit()]
    return max(majors)[1] if majors else None
