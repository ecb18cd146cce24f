"""Whether the formation's commits are kept on two nodes now: a pure verdict over the monitor's node table
(`pgautofailover.node`: each node's reported and assigned state, health, replication state and LSN) and
what this machine sees of each node's processes.

The monitor's rows lag: a SIGKILLed primary is still `primary` there until it misses 3 s of reports.
A node whose processes are gone or stopped (SIGSTOP) is therefore not counted whatever its row says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

# States in which a node takes writes once it reached them (reported = assigned).
WRITABLE = ("primary", "wait_primary", "single")


class Process(StrEnum):
    RUNNING = "running"
    STOPPED = "stopped"  # SIGSTOPped: alive, but neither serving nor reporting
    GONE = "gone"  # no process of it is left (never started, stopped, killed)


@dataclass(frozen=True)
class NodeState:
    """One row of the monitor's node table."""

    node_id: int
    name: str
    port: int
    reported: str  # the state its keeper last reported
    assigned: str  # the goal the monitor gave it
    health: int  # the monitor's health check: 1 good, 0 bad, -1 not checked yet
    pg_running: bool
    replication: str  # a primary's standby as pg_stat_replication says: sync, quorum, async, unknown
    lsn: str  # its WAL position when it last reported, `X/Y`
    timeline: int
    reported_ago_s: float  # by the monitor's clock


@dataclass(frozen=True)
class NodeView:
    state: NodeState
    process: Process

    @property
    def settled(self) -> bool:
        return self.state.reported == self.state.assigned

    @property
    def counted(self) -> bool:
        """Whether it can serve: its processes run and the monitor has not found it unhealthy."""
        return self.process is Process.RUNNING and self.state.health != 0


class Synchrony(StrEnum):
    SYNCHRONOUS = "synchronous"
    ONE_COPY = "one_copy"
    STANDBY_LOST = "standby_lost"
    NO_PRIMARY = "no_primary"


MESSAGES = {
    Synchrony.SYNCHRONOUS: "synchronous: commits wait for the standby",
    Synchrony.ONE_COPY: "ONE COPY: commits are acknowledged by the primary alone until the standby returns",
    Synchrony.STANDBY_LOST: "STANDBY LOST: commits wait for a standby that is gone, until the monitor lets the "
    "primary go on alone (a few seconds)",
    Synchrony.NO_PRIMARY: "NO PRIMARY: writes fail until the monitor promotes a node",
}


@dataclass(frozen=True)
class Verdict:
    synchrony: Synchrony
    primary: str | None  # the node that takes writes, if one does
    standby: str | None  # the node that commits wait for, if they do
    why: str

    @property
    def message(self) -> str:
        return MESSAGES[self.synchrony]


def verdict(nodes: Sequence[NodeView]) -> Verdict:
    """SYNCHRONOUS when one counted node is settled `primary`, another is settled `secondary` and the
    primary reports it as a synchronous (or quorum) standby. A primary in `wait_primary` (or `single`)
    acknowledges commits alone: ONE_COPY. A primary still in `primary` without such a standby has commits
    waiting for one (its synchronous_standby_names is set): STANDBY_LOST. No counted node settled in a
    writable state, or two of them: NO_PRIMARY."""
    writable = [n for n in nodes if n.counted and n.settled and n.state.reported in WRITABLE]
    if len(writable) != 1:
        names = ", ".join(n.state.name for n in writable)
        why = f"{names} all claim to take writes" if writable else "no running node is settled as primary"
        return Verdict(Synchrony.NO_PRIMARY, None, None, why)
    primary = writable[0]
    name = primary.state.name
    if primary.state.reported != "primary":
        return Verdict(Synchrony.ONE_COPY, name, None, f"{name} is {primary.state.reported}")
    standbys = [n for n in nodes if n is not primary and n.counted and n.settled and n.state.reported == "secondary"]
    if standbys and primary.state.replication in ("sync", "quorum"):
        standby = standbys[0].state.name
        return Verdict(Synchrony.SYNCHRONOUS, name, standby, f"{standby} is a {primary.state.replication} standby")
    return Verdict(Synchrony.STANDBY_LOST, name, None, f"{name} is primary with no synchronous standby running")


def lsn_bytes(lsn: str) -> int | None:
    """A WAL position `X/Y` (hexadecimal) as a byte count; None when it is not one."""
    high, sep, low = lsn.partition("/")
    try:
        return (int(high, 16) << 32) + int(low, 16) if sep else None
    except ValueError:
        return None


def lag_bytes(primary_lsn: str, node_lsn: str) -> int | None:
    """How far a node's last reported WAL position is behind the primary's; both are reports made up to a
    second apart, so this is a rough figure (0 once it caught up)."""
    ahead, behind = lsn_bytes(primary_lsn), lsn_bytes(node_lsn)
    return None if ahead is None or behind is None else max(0, ahead - behind)
