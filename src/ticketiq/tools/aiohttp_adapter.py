"""What the vendor transport (vendor_pool.py) needs of aiohttp beyond its public API, kept in this one module.

Everything else vendor_pool.py asks of aiohttp is public: ClientSession's options (its middlewares among
them), ClientTimeout, TCPConnector's options, its exceptions. Three things have no public form:

- `Connector.connect`. BaseConnector.connect, which hands a request its connection, is public and
  documented; what aiohttp calls it with (the request, its traces, its ClientTimeout) and what it gives
  back (aiohttp.connector.Connection, whose `protocol` is the connection's ResponseHandler) are not
  exported. Here a subclass hears each request ask for a connection (`admit`, which may refuse: I9) and
  take one (`taken`), and counts the connections made (`opened`; the pool's own `_create_connection`
  is left alone: a connection not seen before is a new one).
- `Wire.transport`: the asyncio transport a connection's protocol writes the request's bytes to.
  vendor_pool.py puts its own in its place while a request is written (I3, I14: the last check runs
  inside each write to the socket) and puts it back after.
- `books()`: the pool's own count of connections in use and idle to a host (`_acquired_per_host`,
  `_conns`), read by the tests and the benchmark only.

tests/integration/test_aiohttp_adapter.py fails the day aiohttp changes any of these: the names and
signatures, and what they do against a real server. pyproject.toml pins aiohttp below its next minor
release for them.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Protocol

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

__all__ = ["Connector", "Wire", "books"]


class Wire(Protocol):
    """A connection as aiohttp holds it: `transport` is where the request's bytes are written."""

    transport: asyncio.Transport | None


class Connector(aiohttp.TCPConnector):
    """aiohttp's TCPConnector, telling a subclass of each request that asks for a connection (`admit`)
    and of each connection a request takes (`taken`), new or idle; `opened` counts the new ones."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.opened = 0  # connections made since the start: churn shows here
        self.wires_made: weakref.WeakSet[ResponseHandler] = weakref.WeakSet()

    def admit(self) -> None:
        """A request asks for a connection; raising refuses it before anything is taken or sent."""

    def taken(self, wire: Wire) -> None:
        """A request took this connection: from here its bytes may go."""

    # aiohttp's signature: its `timeout` is the request's ClientTimeout, not a bound of ours.
    async def connect(
        self,
        req: aiohttp.ClientRequest,
        traces: list[Trace],
        timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109
    ) -> Connection:
        self.admit()
        conn = await super().connect(req, traces, timeout)
        wire = conn.protocol
        if wire is not None:
            if wire not in self.wires_made:
                self.wires_made.add(wire)
                self.opened += 1
            self.taken(wire)
        return conn


def books(connector: aiohttp.TCPConnector, host: str, port: int) -> tuple[int, int]:
    """(connections held, of them idle) to host:port, as the pool counts them; for tests and the benchmark."""
    if connector.closed:
        return (0, 0)
    held = idle = 0
    for key, wires in connector._acquired_per_host.items():
        if (key.host, key.port) == (host, port):
            held += len(wires)
    for key, kept in connector._conns.items():
        if (key.host, key.port) == (host, port):
            idle += len(kept)
    return (held + idle, idle)
