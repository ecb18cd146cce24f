"""Which server of a multi-host URL a process connects to, and how: the one that last took its writes
first, the others raced against it after a head start.

libpq (and psycopg's async connect) tries the hosts of `host=a,b` in turn, each for up to the connect
timeout (never under 2 s), and keeps the first that takes writes (`target_session_attrs=read-write`). A
primary that was killed refuses at once, but one that froze (a stalled machine) accepts the TCP
connection and answers nothing: every new connection would wait out the timeout on it before trying the
next host, and a pool refilling twenty connections three at a time would spend seconds on it after each
failover. So every connection of the process tries the host that last served one first, and when it has
not answered within HEAD_START_S the next host is tried beside it (as Happy Eyeballs does for IPv6 and
IPv4): the first to take the connection wins, the others are closed. The first connection to find the
new primary moves it to the front for all the others.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from psycopg.conninfo import conninfo_to_dict, make_conninfo

HEAD_START_S = 0.25
T = TypeVar("T")
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


def split(conninfo: str) -> list[str]:
    """One conninfo per host of a multi-host `conninfo`, in its order (itself when it names one host)."""
    params: dict[str, Any] = conninfo_to_dict(conninfo)
    hosts = str(params.get("host") or "").split(",")
    if len(hosts) < 2:
        return [conninfo]
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    addrs = str(params["hostaddr"]).split(",") if params.get("hostaddr") else None
    out = []
    for i, host in enumerate(hosts):
        one = {**params, "host": host, "port": ports[i] if i < len(ports) else ports[-1]}
        if addrs is not None and len(addrs) == len(hosts):
            one["hostaddr"] = addrs[i]
        out.append(make_conninfo("", **one))
    return out


async def first_of(
    attempts: list[str], connect: Callable[[str], Awaitable[T]], close: Callable[[T], Awaitable[None]]
) -> T:
    """The first of `attempts` to connect, each started HEAD_START_S after the one before unless that one
    failed sooner. One that fails while a slower one still runs is tried again every HEAD_START_S (a
    standby being promoted beside a frozen old primary takes writes within a quarter second of it, not
    after the frozen one's connect timeout). The others are cancelled, or closed if they connected too.
    Every attempt failed: the last error."""
    loop = asyncio.get_running_loop()
    pending: dict[asyncio.Task[T], str] = {}
    errors: list[BaseException] = []
    waiting = list(attempts)  # not started yet, in order
    again: list[tuple[float, str]] = []  # failed beside a slower one: tried again at this time
    next_start = loop.time()
    try:
        while waiting or pending:
            now = loop.time()
            if waiting and (now >= next_start or not pending):
                first = waiting.pop(0)
                pending[asyncio.ensure_future(connect(first))] = first
                next_start = now + HEAD_START_S
            for entry in [e for e in again if e[0] <= now]:
                again.remove(entry)
                pending[asyncio.ensure_future(connect(entry[1]))] = entry[1]
            wakes = ([next_start] if waiting else []) + [at for at, _ in again]
            timeout = max(0.0, min(wakes) - loop.time()) if wakes else None
            done, _ = await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                conninfo = pending.pop(task)
                failure = task.exception()
                if failure is None:
                    return task.result()
                errors.append(failure)
                if pending or waiting:
                    again.append((loop.time() + HEAD_START_S, conninfo))
            if not pending and not waiting:
                break
        raise errors[-1]
    finally:
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(BaseException):
                late = await task
                await close(late)
