"""The vendor connection pool: per vendor host, a stack of idle connections, and a request takes the top one.

Why not httpx's default pool (httpcore's AsyncConnectionPool): on every request and every response close
it walks every connection it holds, asks each whether it expired (a readability poll of its socket: a
syscall per idle connection) and counts them again inside the walk (quadratic). The same count closes
idle connections whenever the pool holds more connections than its keep-alive limit, so at 64 runs in
flight it closed and opened connections all along (issue 19: 13.5% of a process's CPU). Subclassing it
with an O(1) assignment is no smaller: its request flow and its response stream call the scan directly
and share its private lists, so every method that matters would be written again over state that any
httpcore release may change. So this module does only the pool bookkeeping. The protocol stays
httpcore's own connection (AsyncHTTPConnection, HTTP/1.1), and the httpx API stays httpx's transport:
VendorTransport is an httpx.AsyncHTTPTransport with a VendorPool in place of its pool, so the mapping to
httpx's exceptions (ConnectError, ReadError, PoolTimeout, ...), the response streams and the request
extensions (`timeout`, `trace`) are httpx's and httpcore's unchanged.

- Per origin (scheme, host, port): a LIFO stack of idle connections. A request pops the most recently
  used one and asks only that one whether the server closed it meanwhile (its socket readable while
  idle); if so it is closed and the next one is popped.
- The bottom of the stack is the least recently used: connections idle longer than KEEPALIVE_S are
  closed from there, by the clock alone (no syscall), whenever the origin's stack is used.
- Else a new connection is opened when the origin holds fewer than `limit` connections (in use, idle
  or connecting); else the request waits in a FIFO queue for a connection given back (handed over
  directly) or a place freed, at most the request's pool timeout: then httpx.PoolTimeout, nothing sent.
- A connection goes back onto the stack only when httpcore left it idle, its response read to the end
  and closed. A response closed early, a request failed or cancelled mid-way: httpcore closed that
  connection and only its place comes back.
- I3: the trace hook's `http11.send_request_headers.started` fires inside the connection, after the
  pool handed it over, right before the request's bytes go (tools/http.py checks the lease there).

One event loop only (the process's). HTTP(S)_PROXY from the environment is not honoured: httpx reads it
only for a client without its own transport.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from types import TracebackType

import httpcore
import httpx

# Shorter than the 60 s idle timeout of the load balancers many vendors sit behind, so that we close an
# idle connection before the far end does (a request racing the far end's close fails without an answer).
KEEPALIVE_S = 50.0

Connection = httpcore.AsyncHTTPConnection


@dataclass(eq=False)
class _Origin:
    """One vendor host's connections."""

    origin: httpcore.Origin
    # (connection, given back at): the right end is the most recently used, the left end the oldest.
    idle: deque[tuple[Connection, float]] = field(default_factory=deque)
    held: set[Connection] = field(default_factory=set)  # every connection counted against the limit
    waiting: deque[asyncio.Future[Connection | None]] = field(default_factory=deque)  # None: the pool closed


class VendorPool:
    """httpcore's request interface (what httpx's transport calls) over per-origin stacks; see the module
    docstring."""

    def __init__(
        self,
        limit: int,
        keepalive_s: float = KEEPALIVE_S,
        ssl_context: ssl.SSLContext | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a vendor pool needs room for one connection at least, not {limit}")
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._ssl_context = ssl_context
        self._network_backend = network_backend
        self._origins: dict[tuple[bytes, bytes, int], _Origin] = {}  # by (scheme, host, port)
        self._closed = False
        self.opened = 0  # connections made since the start: churn shows here

    def counts(self, origin: httpcore.Origin) -> tuple[int, int]:
        """(connections held, of them idle) for one origin: for tests and the benchmark."""
        host = self._origins.get(_key(origin))
        return (0, 0) if host is None else (len(host.held), len(host.idle))

    async def handle_async_request(self, request: httpcore.Request) -> httpcore.Response:
        scheme = request.url.scheme
        if scheme not in (b"http", b"https"):
            raise httpcore.UnsupportedProtocol(f"Request URL has an unsupported protocol '{scheme.decode()}://'.")
        origin = request.url.origin
        host = self._origins.get(_key(origin))
        if host is None:
            host = self._origins[_key(origin)] = _Origin(origin)
        timeout = request.extensions.get("timeout", {}).get("pool")
        while True:
            connection = await self._take(host, timeout)
            try:
                response = await connection.handle_async_request(request)
            except httpcore.ConnectionNotAvailable:
                # Not ours to use after all (httpcore's own pool retries the same way); its place comes back.
                await self._give_back(host, connection)
                continue
            except BaseException:
                # httpcore closed the connection (or never opened it): only its place comes back.
                await self._give_back(host, connection)
                raise
            assert isinstance(response.stream, AsyncIterable)
            return httpcore.Response(
                status=response.status,
                headers=response.headers,
                content=_Lease(response.stream, self, host, connection),
                extensions=response.extensions,
            )

    async def _take(self, host: _Origin, wait_s: float | None) -> Connection:
        """The most recently used live idle connection, else a new one if there is room, else the first
        one given back or place freed while this request waits."""
        if self._closed:
            raise httpcore.ConnectError("the vendor connection pool is closed")
        closing = self._expired(host, time.monotonic())
        connection = self._pick(host, closing)
        if closing:
            try:
                await _close(closing)
            except BaseException:
                if connection is not None:  # cancelled meanwhile: not taken after all
                    await self._give_back(host, connection)
                raise
        if connection is not None:
            return connection
        waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
        host.waiting.append(waiter)
        try:
            async with asyncio.timeout(wait_s):
                given = await waiter
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                # Handed a connection just as the wait ended: it goes to the next in line.
                handed = waiter.result()
                if handed is not None:
                    await self._give_back(host, handed)
            elif waiter in host.waiting:  # else passed over already, as done
                waiter.cancel()
                host.waiting.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise httpcore.PoolTimeout(f"no connection to {host.origin} came free within {wait_s} s") from None
            raise
        if given is None:
            raise httpcore.ConnectError("the vendor connection pool is closed")
        return given

    def _pick(self, host: _Origin, closing: list[Connection]) -> Connection | None:
        """The top idle connection the server has not closed (the dead ones go to `closing`), else a new
        one if the origin has room, else None: the request waits."""
        while host.idle:
            connection, _ = host.idle.pop()
            # Only this one socket is polled: readable while idle means the server closed it.
            if connection.is_available() and not connection.has_expired():
                return connection
            self._drop(host, connection)
            closing.append(connection)
        return self._open(host) if len(host.held) < self._limit else None

    def _open(self, host: _Origin) -> Connection:
        # Counted against the limit from now: connecting happens in the request, outside the pool.
        connection = Connection(
            origin=host.origin, ssl_context=self._ssl_context, network_backend=self._network_backend
        )
        host.held.add(connection)
        self.opened += 1
        return connection

    async def _give_back(self, host: _Origin, connection: Connection) -> None:
        """A request is done with the connection: idle, it serves the next in line or goes on the stack;
        anything else (half read, failed, closed) is closed and its place serves the next in line."""
        if connection not in host.held:
            return  # the pool closed meanwhile, and closed it
        now = time.monotonic()
        if connection.is_available():
            while host.waiting:
                waiter = host.waiting.popleft()
                if not waiter.done():
                    waiter.set_result(connection)
                    return
            host.idle.append((connection, now))
            await _close(self._expired(host, now))
            return
        self._drop(host, connection)
        await _close([connection])

    def _drop(self, host: _Origin, connection: Connection) -> None:
        """The connection no longer counts; its place goes to the first request waiting, as a new connection."""
        host.held.discard(connection)
        while host.waiting:
            waiter = host.waiting.popleft()
            if not waiter.done():
                waiter.set_result(self._open(host))
                return

    def _expired(self, host: _Origin, now: float) -> list[Connection]:
        """Connections idle longer than the keep-alive, taken off the bottom of the stack, to be closed."""
        expired = []
        while host.idle and now - host.idle[0][1] > self._keepalive_s:
            connection, _ = host.idle.popleft()
            self._drop(host, connection)
            expired.append(connection)
        return expired

    async def aclose(self) -> None:
        """Close every connection, idle or in use; requests waiting for one fail (nothing was sent)."""
        self._closed = True
        closing: list[Connection] = []
        for host in self._origins.values():
            closing += host.held
            host.held.clear()
            host.idle.clear()
            while host.waiting:
                waiter = host.waiting.popleft()
                if not waiter.done():
                    waiter.set_result(None)
        self._origins.clear()
        await _close(closing)

    async def __aenter__(self) -> VendorPool:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


class _Lease:
    """A response's body on its connection; closing it gives the connection back to the pool."""

    def __init__(self, stream: AsyncIterable[bytes], pool: VendorPool, host: _Origin, connection: Connection):
        self._stream = stream
        self._pool = pool
        self._host = host
        self._connection = connection
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for part in self._stream:
                yield part
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # httpcore leaves the connection idle only when the response was read to its end.
            aclose = getattr(self._stream, "aclose", None)
            if aclose is not None:
                await aclose()
        finally:
            await self._pool._give_back(self._host, self._connection)


def _key(origin: httpcore.Origin) -> tuple[bytes, bytes, int]:
    return (origin.scheme, origin.host, origin.port)  # httpcore's Origin compares equal but has no hash


async def _close(connections: list[Connection]) -> None:
    if connections:
        # Shielded: a request cancelled meanwhile still closes every socket it took out of the pool.
        await asyncio.shield(asyncio.gather(*(c.aclose() for c in connections)))


class VendorTransport(httpx.AsyncHTTPTransport):
    """httpx's transport (exception mapping, streams, extensions) over a VendorPool of `limit` connections
    per vendor host, all of which may stay idle (KEEPALIVE_S) for the next request."""

    def __init__(self, limit: int, keepalive_s: float = KEEPALIVE_S, verify: ssl.SSLContext | bool = True) -> None:
        context = httpx.create_ssl_context(verify=verify)
        super().__init__(verify=context)
        self.pool = VendorPool(limit, keepalive_s, context)
        self._pool = self.pool  # type: ignore[assignment]  # httpx calls only handle_async_request, aclose, async with
