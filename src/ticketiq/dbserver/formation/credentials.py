"""Who may connect to the formation: one password per formation, for the app's role on the nodes, pg_autoctl's
replication role and its role on the monitor. It is made at the first `up` and kept in libpq's passfile
under the formation's folder (`Layout.passfile`, 0600, the formation user's), which every process of the
formation is given as PGPASSFILE: pg_autoctl's connections to the monitor, pg_basebackup, pg_rewind and a
standby's stream find it there, so it is on no command line, in no environment and in no pg_autoctl
file. The URL `up` prints carries it.

pg_autoctl 2.0 makes each server with initdb --auth=trust, and its own lines come after initdb's: such a
server trusts every local user. So `up` makes the data folders itself and writes `plan.HBA_TEXT` before a
server first listens (`write_hba`), and a server just made gives its roles the password (as verifiers,
over its Unix socket, which only the formation's user and root reach) before anything reaches it over TCP
(`give_passwords`). A formation made before passwords is moved by the first `up` that starts its
processes (theirs must carry PGPASSFILE, or they could no longer reach each other): `secure`.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path

import psutil
import psycopg
from psycopg import sql

from ticketiq.dbserver.authentication import new_password, verifier
from ticketiq.dbserver.formation.plan import (
    HBA_TEXT,
    MONITOR,
    MONITOR_DATABASE,
    MONITOR_ROLES,
    NODE_ROLES,
    NODES,
    FormationError,
    Layout,
    passfile_text,
    password_in,
)
from ticketiq.dbserver.formation.processes import RunAs

CONNECT_TIMEOUT_S = 10
STARTED_WITHIN_S = 60.0  # a server just made, started by its keeper: seconds here
# A role's password, set on the primary, is applied on the standby before its pg_hba.conf asks for it; a
# standby that is gone makes the statement give up waiting after this (the password is on the primary).
APPLIED_WITHIN_MS = 30_000


def password(layout: Layout) -> str | None:
    """The formation's password; None for a formation made before passwords (it trusts, until `up`)."""
    try:
        return password_in(layout.passfile.read_text())
    except FileNotFoundError:
        return None
    except PermissionError:
        raise FormationError(f"{layout.passfile} (the formation's password) is not readable by this user: run "
                             "ticketiq as root or as the formation's user") from None  # fmt: skip


def keep_passfile(layout: Layout, run_as: RunAs) -> str:
    """The formation's password, made with its passfile when there is none (0600 from the first byte, then
    handed to the formation's user)."""
    found = password(layout)
    if found is not None:
        _narrow(layout.passfile)
        return found
    made = new_password()
    scratch = layout.passfile.with_name(layout.passfile.name + ".new")
    scratch.unlink(missing_ok=True)
    fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), 0o600)
        handle.write(passfile_text(made))
        handle.flush()
        os.fsync(handle.fileno())
    run_as.own(scratch)
    scratch.replace(layout.passfile)
    return made


def _narrow(path: Path) -> None:
    """libpq ignores a passfile that others may read."""
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        os.chmod(path, 0o600)


def private_sockets(layout: Layout, run_as: RunAs) -> None:
    """The sockets' folder, where the servers trust whoever connects: the formation user's alone (0700). One
    in /tmp (a formation folder whose path is too long for a socket's) that someone else made or linked is
    refused rather than used."""
    folder = layout.sockets
    run_as.own(folder)
    found = folder.lstat()
    if stat.S_ISLNK(found.st_mode) or not stat.S_ISDIR(found.st_mode) or found.st_uid != run_as.uid:
        raise FormationError(f"{folder}, the formation's socket folder, is not a folder of the formation's user "
                             f"{run_as.user}: remove it, then `ticketiq db ha up`")  # fmt: skip
    if stat.S_IMODE(found.st_mode) != 0o700:
        os.chmod(folder, 0o700)


def secured(layout: Layout) -> bool:
    """Whether every server asks for the password over TCP: its pg_hba.conf is ours (pg_autoctl may have
    appended lines since; below ours they never match)."""
    return all(_hba(layout, name).startswith(HBA_TEXT) for name in (MONITOR, *NODES))


def _hba(layout: Layout, name: str) -> str:
    try:
        return (layout.pgdata(name) / "pg_hba.conf").read_text()
    except FileNotFoundError:
        return ""


def without_passfile(processes: Iterable[psutil.Process], layout: Layout) -> list[int]:
    """The pids of the formation's processes started without its PGPASSFILE (by a release before
    passwords): once the servers ask for the password, they could no longer reach each other."""
    missing = []
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("PGPASSFILE") != str(layout.passfile):
                missing.append(proc.pid)
    return missing


def secure(layout: Layout, run_as: RunAs, ports: dict[str, int], primary: str, secret: str) -> None:
    """Give the roles the formation's password (the monitor's on the monitor; the nodes' on the primary,
    applied on the standby before its pg_hba.conf changes), then write our pg_hba.conf on every server and
    have it reloaded. Each step can be done again: a secure cut short is finished by the next `up`."""
    with _over_socket(layout, run_as, ports[MONITOR], MONITOR_DATABASE) as conn:
        _set_passwords(conn, MONITOR_ROLES, secret)
    with _over_socket(layout, run_as, ports[primary], "postgres") as conn:
        conn.execute(f"SET statement_timeout = {APPLIED_WITHIN_MS}")
        conn.execute("SET synchronous_commit = remote_apply")
        _set_passwords(conn, NODE_ROLES, secret)
    for name in (MONITOR, *NODES):
        if _hba(layout, name) != HBA_TEXT:
            write_hba(layout, run_as, name)
        with _over_socket(layout, run_as, ports[name], "postgres") as conn:
            conn.execute("SELECT pg_reload_conf()")


def write_hba(layout: Layout, run_as: RunAs, name: str) -> None:
    path = layout.pgdata(name) / "pg_hba.conf"
    run_as.write(path, HBA_TEXT)
    os.chmod(path, 0o600)


def give_passwords(layout: Layout, run_as: RunAs, port: int, roles: Iterable[str], secret: str) -> None:
    """A server just made and started: its roles given the password, once it answers on its socket (its
    keeper starts it; bounded by STARTED_WITHIN_S)."""
    deadline = time.monotonic() + STARTED_WITHIN_S
    while True:
        try:
            conn = _over_socket(layout, run_as, port, "postgres")
            break
        except FormationError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with conn:
        _set_passwords(conn, roles, secret)


def _set_passwords(conn: psycopg.Connection[tuple[object, ...]], roles: Iterable[str], secret: str) -> None:
    for role in roles:
        statement = sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            sql.Identifier(role), sql.Literal(verifier(conn, role, secret))
        )
        conn.execute(statement)


def _over_socket(layout: Layout, run_as: RunAs, port: int, database: str) -> psycopg.Connection[tuple[object, ...]]:
    """A connection through the server's Unix socket as its bootstrap superuser (named after the formation's
    user, who ran initdb): trusted there, where only that user and root reach."""
    try:
        return psycopg.connect(host=str(layout.sockets), port=port, user=run_as.user, dbname=database,
                               autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)  # fmt: skip
    except psycopg.Error as exc:
        first_line = (str(exc).splitlines() or ["no answer"])[0]
        raise FormationError(f"cannot reach the server on port {port} through its socket ({first_line})") from exc
