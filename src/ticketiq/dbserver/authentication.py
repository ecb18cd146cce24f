"""How a client proves to our Postgres servers (the embedded one, the formation's nodes and monitor) that it
may connect: a password made once, kept in a file only its owner reads, carried in the URLs handed to our
own processes and masked wherever a URL is shown; and pg_hba.conf with no `trust` line reachable over TCP.

A local OS user who does not own the home reads neither the password file nor a process's environment,
so the URL without its password is all such a user has, and the server refuses it. Pure functions, but
for the password file's two small readers and writers.
"""

from __future__ import annotations

import os
import re
import secrets
import stat
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ticketiq.errors import StorageError

METHOD = "scram-sha-256"
MASK = "***"
# 32 bytes of the system's CSPRNG; token_urlsafe's alphabet needs no quoting in a URL, a libpq passfile
# (no `:` or `\`) or a conninfo string.
_PASSWORD_BYTES = 32
_PRIVATE = 0o600


def new_password() -> str:
    return secrets.token_urlsafe(_PASSWORD_BYTES)


def keep_password(path: Path) -> str:
    """The password kept at `path`, made (mode 0600, never group- or world-readable, not even for a moment)
    when there is none. A file others could read is narrowed to 0600 first: libpq ignores such a
    passfile, and a password is no secret in it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _PRIVATE)
    except FileExistsError:
        return read_password(path)
    except PermissionError:
        raise StorageError(f"cannot make {path} (the database's password) as this user: run ticketiq as the user "
                           f"who owns {path.parent}") from None  # fmt: skip
    made = new_password()
    with os.fdopen(fd, "w") as handle:
        os.fchmod(handle.fileno(), _PRIVATE)  # whatever the umask
        handle.write(made + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return made


def read_password(path: Path) -> str:
    """The password kept at `path`; StorageError saying what to do when it cannot be read."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            os.chmod(path, _PRIVATE)
        found = path.read_text().strip()
    except PermissionError:
        raise StorageError(
            f"{path} (the database's password) is not readable by this user: run ticketiq as the user who owns "
            f"{path.parent}"
        ) from None
    except FileNotFoundError:
        raise StorageError(f"{path} (the database's password) is missing") from None
    if not found:
        raise StorageError(f"{path} (the database's password) is empty")
    return found


# ----- pg_hba.conf ----------------------------------------------------------------------------------


def _method_index(fields: list[str]) -> int | None:
    """Where a pg_hba.conf line's auth method is: `local DATABASE USER METHOD`, `host* DATABASE USER ADDRESS
    [MASK] METHOD`."""
    if not fields or fields[0].startswith("#"):
        return None
    if fields[0] == "local":
        return 3 if len(fields) > 3 else None
    if fields[0].startswith("host"):
        at = 4 if len(fields) > 4 and "/" not in fields[3] and _looks_like_mask(fields[4]) else 3
        return at + 1 if len(fields) > at + 1 else None
    return None


def _looks_like_mask(field: str) -> bool:
    return bool(re.fullmatch(r"[0-9.]+|[0-9a-fA-F:]+", field)) and ("." in field or ":" in field)


def trusting_lines(hba: str) -> list[str]:
    """The lines of a pg_hba.conf that let a client in without any proof (`trust`)."""
    found = []
    for line in hba.splitlines():
        fields = line.split("#", 1)[0].split()
        at = _method_index(fields)
        if at is not None and fields[at] == "trust":
            found.append(line.strip())
    return found


def without_trust(hba: str) -> str:
    """The same pg_hba.conf with every `trust` asking for a password instead (scram-sha-256); comments,
    spacing and every other line as they were."""
    lines = []
    for line in hba.splitlines(keepends=True):
        body, hash_, comment = line.partition("#")
        fields = list(re.finditer(r"\S+", body))
        at = _method_index([f.group() for f in fields])
        if at is not None and fields[at].group() == "trust":
            body = body[: fields[at].start()] + METHOD + body[fields[at].end() :]
        lines.append(body + hash_ + comment)
    return "".join(lines)


# ----- URLs -----------------------------------------------------------------------------------------


def password_of(url: str) -> str | None:
    """The password a database URL (or key=value conninfo) carries, if any."""
    try:
        found = conninfo_to_dict(url).get("password")
    except psycopg.Error:
        return None
    return str(found) if found else None


def with_password(url: str, password: str) -> str:
    """`url` carrying `password` (a URL stays a URL, a conninfo string a conninfo string); one that
    carries a password already is returned as it is."""
    if password_of(url) is not None:
        return url
    if "://" not in url:
        return make_conninfo(url, password=password)
    parts = urlsplit(url)
    userinfo, at, hostinfo = parts.netloc.rpartition("@")
    user = userinfo if at else ""
    return urlunsplit(parts._replace(netloc=f"{user}:{quote(password, safe='')}@{hostinfo}"))


def without_password(url: str) -> str:
    """The database URL as it may be printed or logged: its password, if any, replaced by ***."""
    if "://" not in url:  # a key=value connection string
        return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", rf"\1{MASK}", url)
    parts = urlsplit(url)
    query = re.sub(r"(^|&)(password=)[^&]*", rf"\1\2{MASK}", parts.query)
    if parts.password is None:
        return urlunsplit(parts._replace(query=query))
    userinfo, _, hostinfo = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hostinfo}", query=query))


def verifier(conn: psycopg.Connection[Any], role: str, password: str) -> str:
    """The SCRAM-SHA-256 verifier of `password` for `role`, computed by libpq on this side: `ALTER ROLE ...
    PASSWORD '<verifier>'` sends no password over the connection and leaves none in a server log."""
    made = conn.pgconn.encrypt_password(password.encode(), role.encode(), METHOD.encode())
    return made.decode()
