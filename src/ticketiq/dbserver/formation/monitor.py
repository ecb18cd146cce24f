"""Reading the formation: the monitor's node table, and whether the app's URL takes a write. The named
statements are in `formation.sql`, loaded here once and named `formation.<name>`.

Synchronous (psycopg's blocking connection), as `formation.py` that calls it: a command and the kill
trials' threads look once and wait, with no event loop to share.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row

from ticketiq.dbserver.formation.plan import FormationError
from ticketiq.dbserver.formation.synchrony import NodeState
from ticketiq.storage.queries import parse

STATEMENTS = parse((Path(__file__).parent / "formation.sql").read_text(), "formation")
CONNECT_TIMEOUT_S = 2  # libpq's least; a local server answers in milliseconds or is down


def _sql(name: str) -> str:
    return STATEMENTS[f"formation.{name}"]


def _connect(url: str) -> psycopg.Connection[dict[str, Any]]:
    return psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT_S, autocommit=True, row_factory=dict_row)


def node_states(url: str) -> list[NodeState]:
    """Every node as the monitor (at `url`, `plan.monitor_url`) sees it; raises FormationError when the
    monitor does not answer."""
    try:
        with _connect(url) as conn:
            rows = conn.execute(_sql("nodes")).fetchall()
    except psycopg.Error as exc:
        first_line = (str(exc).splitlines() or ["no answer"])[0]
        port = conninfo_to_dict(url).get("port")
        raise FormationError(f"the monitor on port {port} does not answer ({first_line})") from exc
    return [_node_state(row) for row in rows]


def _node_state(r: dict[str, Any]) -> NodeState:
    return NodeState(
        node_id=int(r["node_id"]),
        name=str(r["name"]),
        port=int(r["port"]),
        reported=str(r["reported"]),
        assigned=str(r["assigned"]),
        health=int(r["health"]),
        pg_running=bool(r["pg_running"]),
        replication=str(r["replication"] or "unknown"),
        lsn=str(r["lsn"] or "0/0"),
        timeline=int(r["timeline"] or 0),
        reported_ago_s=float(r["reported_ago_s"] or 0.0),
    )


def number_sync_standbys(url: str) -> int | None:
    try:
        with _connect(url) as conn:
            row = conn.execute(_sql("number_sync_standbys")).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else int(row["number_sync_standbys"])


def write_port(url: str, within_s: float) -> int | None:
    """The port of the node that took a committed write through `url` (a multi-host URL asking for
    read-write), or None when none did within `within_s`: no node takes writes, or the commit waits for
    a standby that is gone (then it is cancelled; it committed locally, which is harmless here)."""
    gave_up = threading.Event()
    try:
        with _connect(url) as conn:

            def give_up() -> None:
                gave_up.set()
                conn.cancel()

            timer = threading.Timer(within_s, give_up)
            timer.start()
            try:
                conn.execute(_sql("write_probe"))
            finally:
                timer.cancel()
            # A commit cancelled while it waited for a standby is kept locally and reported as done: not
            # a write that the formation took.
            return None if gave_up.is_set() else int(conn.info.port)
    except psycopg.Error:
        return None
