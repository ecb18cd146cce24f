"""`ticketiq db ha up|down|status`: the local pg_auto_failover formation (dbserver/formation/) of
TICKETIQ_HOME, for running the app on a primary with a synchronous standby and failing it over."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ticketiq.dbserver.formation import Formation, FormationError, Status, Synchrony, down, up
from ticketiq.settings import Settings

UP_HELP = (
    "make the formation (the first time) and start it: a monitor and two Postgres nodes on 127.0.0.1 under "
    "TICKETIQ_HOME/ha, run as the system user ticketiq-pg when run as root; waits until the standby is "
    "synchronous and prints the multi-host URL, with the formation's password (kept in TICKETIQ_HOME/ha/pgpass), "
    "on the last line. They keep running after it returns."
)
DOWN_HELP = "stop every process of the formation, by pid; its data stays for the next `up` (--purge deletes it)"
STATUS_HELP = "each node's role, processes and WAL position, and whether commits are synchronous now (exit 1: not up)"


def add_parser(db_actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p_ha = db_actions.add_parser("ha", help="a primary, its synchronous standby and a pg_auto_failover monitor")
    actions = p_ha.add_subparsers(dest="ha_action", required=True)
    p_up = actions.add_parser("up", help=UP_HELP, description=UP_HELP)
    p_up.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for it (default 120)")
    p_down = actions.add_parser("down", help=DOWN_HELP, description=DOWN_HELP)
    p_down.add_argument("--purge", action="store_true", help="delete its data and settings as well")
    p_status = actions.add_parser("status", help=STATUS_HELP, description=STATUS_HELP)
    p_status.add_argument("--json", action="store_true", help="print it as JSON, for scripts")


def ha_command(settings: Settings, args: argparse.Namespace) -> int:
    home = Path(settings.home)
    if args.ha_action == "up":
        return _up(home, args.timeout)
    if args.ha_action == "down":
        return _down(home, args.purge)
    return _status(home, args.json)


def _say(line: str) -> None:
    print(line, flush=True)


def _up(home: Path, timeout_s: float) -> int:
    made = up(home, timeout_s=timeout_s, say=_say)
    print(status_text(made.status))
    if made.already:
        print(f"the formation was up already (looked in {made.seconds:.1f} s)")
    else:
        print(f"formation up in {made.seconds:.1f} s")
    print(made.url, flush=True)  # the last line: URL=$(ticketiq db ha up | tail -1)
    return 0


def _down(home: Path, purge: bool) -> int:
    done = down(home, purge=purge)
    for name, pids in done.stopped.items():
        print(f"stopped {name}: pids {' '.join(map(str, pids))}")
    if not done.stopped:
        print(f"no process of the formation in {done.root} was running")
    print(f"deleted {done.root}" if done.purged else f"its data stays in {done.root} for the next `up`")
    return 0


def _status(home: Path, as_json: bool) -> int:
    try:
        now = Formation.load(home).status()
    except FormationError as exc:
        if as_json:
            print(json.dumps({"up": False, "error": str(exc)}))
        else:
            print(f"ticketiq: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(now.to_json(), indent=2) if as_json else status_text(now))
    return 0 if now.up else 1


def status_text(status: Status) -> str:
    """The formation as a table and a verdict line (pure)."""
    rows = [("NODE", "PORT", "PROCESS", "KEEPER", "POSTMASTER", "REPORTED", "ASSIGNED", "HEALTH", "WAL", "BEHIND")]
    for node in (status.monitor, *status.nodes):
        s = node.state
        rows.append((
            node.name, str(node.port), node.process.value, _pid(node.keeper_pid), _pid(node.postmaster_pid),
            s.reported if s else "-", s.assigned if s else "-", _health(s.health) if s else "-",
            f"{s.lsn} tli {s.timeline}" if s else "-", _behind(node.lag_bytes),
        ))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    v = status.verdict
    if v is None:
        lines.append(f"DOWN: {status.monitor_error}; `ticketiq db ha up` starts it")
    else:
        lines.append(f"{v.message} ({v.why})")
        if v.synchrony is not Synchrony.SYNCHRONOUS and status.number_sync_standbys is not None:
            lines.append(
                f"(number_sync_standbys {status.number_sync_standbys}: commits wait for a standby while one is up)"
            )
    lines.append(f"url  {status.url}")
    return "\n".join(lines)


def _pid(pid: int | None) -> str:
    return "-" if pid is None else str(pid)


def _health(health: int) -> str:
    return {1: "good", 0: "BAD"}.get(health, "unknown")


def _behind(lag: int | None) -> str:
    if lag is None:
        return "-"
    return f"{lag} B" if lag < 1024 * 1024 else f"{lag / (1024 * 1024):.1f} MiB"
