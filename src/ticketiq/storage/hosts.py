"""Which server of a multi-host URL a process connects to first: the one that last took its writes.

libpq (and psycopg's async connect) tries the hosts of `host=a,b` in turn, each for up to the connect
timeout (never under 2 s), and keeps the first that takes writes (`target_session_attrs=read-write`). A
primary that was killed refuses at once, but one that froze (a stalled machine) accepts the TCP
connection and answers nothing: every new connection would wait out the timeout on it before trying the
next host, and a pool refilling twenty connections three at a time would spend seconds on it after each
failover. So every connection of the process puts the host that last served one first; the first to
find the new primary moves it to the front for all the others.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

_last: tuple[str, str] | None = None  # (host, port) that last took a connection of this process


def preferring(conninfo: str, host: str, port: str) -> str:
    """`conninfo` with `host:port` moved to the front of its hosts, when it is one of several (pure)."""
    params: dict[str, Any] = conninfo_to_dict(conninfo)
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        return conninfo
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    addrs = str(params["hostaddr"]).split(",") if params.get("hostaddr") else None
    pairs = list(zip(hosts, ports, strict=False))
    if (host, port) not in pairs:
        return conninfo
    at = pairs.index((host, port))
    order = [at, *(i for i in range(len(pairs)) if i != at)]
    params["host"] = ",".join(hosts[i] for i in order)
    params["port"] = ",".join(ports[i] for i in order)
    if addrs is not None and len(addrs) == len(hosts):
        params["hostaddr"] = ",".join(addrs[i] for i in order)
    return make_conninfo("", **params)


def ordered(conninfo: str) -> str:
    """`conninfo` with the host that last took a connection of this process first."""
    return conninfo if _last is None else preferring(conninfo, *_last)


def took(host: str, port: int | str) -> None:
    """A connection was made to `host:port`: the next ones try it first."""
    global _last
    _last = (host, str(port))
