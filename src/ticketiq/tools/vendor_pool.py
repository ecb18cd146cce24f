"""The vendor and model HTTP transport: httpx's API over aiohttp's connection pool and HTTP/1.1 engine.

Why: a run makes about 7 requests (4 to the model, 3 to vendors) and each cost ~0.86 ms of CPU through
httpx + httpcore + h11 + anyio, most of it below httpx's client (its transport alone, 745 us a POST
against a local keep-alive server); aiohttp's session sends the same POST for ~200 us (issue 19: a run
may cost 10 ms of app CPU). So every caller keeps httpx's API (`client.request`, `build_request`/`send`,
its exceptions, auth, cookies, redirects and content decoding) and only the transport underneath is
aiohttp's: VendorTransport hands each request to one aiohttp.ClientSession and gives httpx the status,
the raw headers and the body read whole (nothing in TicketIQ streams a response).

- The request goes out with exactly httpx's headers: aiohttp adds none of its own (skip_auto_headers),
  keeps no cookies (httpx's client does) and decodes no content-encoding (httpx does, once).
- Pool: aiohttp's TCPConnector, `limit` connections per host (one pool per vendor host; no total cap),
  idle ones kept KEEPALIVE_S. A request pops the oldest idle connection of its host's deque and checks
  only that one (`is_connected`, no syscall; a connection the server closed is seen by the event loop
  and skipped); nothing scans every connection per request (aiohttp sweeps the expired ones once per
  keep-alive period). In front of it, each host has a gate of `limit` places (an asyncio.Semaphore: a
  FIFO that hands a place on when a waiter it woke is cancelled instead): a request finding them all
  taken waits there, at most its `pool` timeout: httpx.PoolTimeout, nothing sent. A place is given back
  only after the request's connection went back to the pool, so aiohttp's own queue stays empty.
- Timeouts (httpx's `timeout` extension): pool as above; connect bounds the TCP (and TLS) connect;
  read bounds each wait for bytes of the answer; write bounds the time from the connection being ready
  until the request's bytes have all left for the kernel (aiohttp has no write bound of its own). Each
  expiry is the httpx timeout of its phase, and every failure is the httpx error its transport gives
  (ConnectError, RemoteProtocolError, ReadError, UnsupportedProtocol), chained to aiohttp's.
- I3, I14: a request's last check (the `BEFORE_WRITE` extension: its lease and its write's window) runs
  inside each `transport.write` of its bytes, in the same call stack and with no await between the check
  and the socket's send (`_LastMoment`). Run any earlier (when the connection left the pool, as it once
  was), a process frozen (SIGSTOP, a paused VM) after the check and let go on after the write's window
  still sent the write: the body is written by a task of its own a loop turn later, and nothing looked
  at the clock again. Each write, not only the first: a request cut off before its last byte is one its
  vendor never takes. The stall watch (runtime/stall.py) is asked at the same instants. Refused, the
  connection is aborted (a request it began is never finished) and the check's exception comes out as
  raised. A request still queued for a connection is not checked here.
- I9: aiohttp sends a request again, once, on a new connection when the server closed a kept-alive one
  under it (for GET, PUT, DELETE, ...). A client middleware (`_sent_once`) answers that second try with
  the first's failure, and a second connect for the same request is refused besides: a request's bytes
  go out at most once; resending is tools/http.py's decision.

- A request sent again and again but for its body (a model's steps) need not be an httpx.Request each
  time: `prepare` works out its URL, host and headers once (the headers exactly as an httpx.Request of
  them would carry), and `send` sends one body on it through the same gate, checks, timeouts and errors,
  answering what it read (`Answer`; `Answer.response()` is the httpx.Response, which decodes a compressed
  body). A model's step on it cost 0.42-0.48 ms of CPU, against 0.56-0.84 through an httpx.Request and
  httpx.Response (2 cores, bench/model_client.py's `app transport`).

What of aiohttp this needs beyond its public API (the connect hook, a connection's transport, the pool's
books) is in aiohttp_adapter.py, with the test that fails the day aiohttp changes it.

One event loop only (the process's): the session is made on first use.

Behind a company's network (docs/going-live.md): HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and NO_PROXY (either
case) are honoured as httpx and the OpenAI SDK honour them, read once when the transport is made; each
host's route (a proxy or none) is decided once (`route`), not per request. aiohttp's own trust_env stays
off: it would read the environment on every request and ~/.netrc besides (credentials we never meant to
send). A private CA: SSL_CERT_FILE (or SSL_CERT_DIR) replaces certifi's roots, as in httpx.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import ssl
import urllib.request
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import aiohttp
import httpx
from yarl import URL

from ticketiq.runtime import stall, tracing
from ticketiq.runtime.faults import Faults
from ticketiq.tools.aiohttp_adapter import Connector, Wire, books

# Shorter than the 60 s idle timeout of the load balancers many vendors sit behind, so that we close an
# idle connection before the far end does (a request racing the far end's close fails without an answer).
KEEPALIVE_S = 50.0

# The request extension holding its last check: called with no argument as each write of its bytes goes to
# the socket; it raises to send nothing more (tools/http.py: last_check, the lease and the write's window).
BEFORE_WRITE = "ticketiq.before_write"

# Headers aiohttp would add or replace; httpx already wrote the ones it means to send.
_NOT_OURS = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")

LastCheck = Callable[[], None]


class _Exchange:
    """One request's state, seen by the connector through `_EXCHANGE` (connect runs in the request's task)."""

    __slots__ = (
        "check", "connected", "faults", "guard", "lost", "refused", "write_s", "write_stalled", "write_timer",
    )  # fmt: skip

    def __init__(self, check: LastCheck | None, write_s: float | None, faults: Faults | None = None) -> None:
        self.check = check
        self.faults = faults
        self.refused: BaseException | None = None  # what the last check raised: the request was cut off
        self.lost: Exception | None = None  # how its one try failed (I9: the answer to a second try)
        self.guard: _LastMoment | None = None  # on the connection's transport while the request is written
        self.write_s = write_s  # None: no bound, or no body to write
        self.connected = False  # a connection came from the pool: from here bytes may go
        self.write_stalled = False
        self.write_timer: asyncio.TimerHandle | None = None


_EXCHANGE: ContextVar[_Exchange | None] = ContextVar("ticketiq_vendor_exchange", default=None)


class _Connector(Connector):
    """aiohttp's pool with the last-moment hook (I3) and one connect a request (I9)."""

    def admit(self) -> None:
        exchange = _EXCHANGE.get()
        if exchange is not None and exchange.connected:
            # aiohttp retrying on a new connection: the first may have reached the server (I9).
            raise aiohttp.ServerDisconnectedError("the server closed the connection; the request is not sent again")

    def taken(self, wire: Wire) -> None:
        exchange = _EXCHANGE.get()
        if exchange is None:  # not sent through VendorTransport
            return
        exchange.connected = True
        if wire.transport is not None:
            # I3, I14: checked as its bytes are written, not now: a loop turn or more lies between.
            wire.transport = _LastMoment(_bare(wire.transport), wire, exchange)
        if exchange.write_s is not None:
            exchange.write_timer = asyncio.get_running_loop().call_later(
                exchange.write_s, _write_deadline, exchange, wire
            )


async def _sent_once(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
    """I9: aiohttp tries an idempotent request again, on a new connection, when the server closed a kept-alive
    one under it (RFC 9112's retry). Its second try fails as the first did: nothing goes out again."""
    exchange = _EXCHANGE.get()
    if exchange is None:
        return await handler(request)
    if exchange.lost is not None:
        raise exchange.lost
    try:
        return await handler(request)
    except Exception as exc:
        exchange.lost = exc
        raise


class _LastMoment(asyncio.Transport):
    """A connection's transport while its request is being written: each write (or writelines) runs the
    request's last check in its own call stack, just before the socket's send (I3, I14). Everything else
    passes through. The request's end puts the connection's own transport back (`unwrap`)."""

    def __init__(self, transport: asyncio.Transport, wire: Wire, exchange: _Exchange) -> None:
        super().__init__()
        self.bare = transport
        self._wire = wire
        self._exchange = exchange
        exchange.guard = self

    def unwrap(self) -> None:
        if self._wire.transport is self:
            self._wire.transport = self.bare

    def _last_check(self) -> None:
        exchange = self._exchange
        try:
            if exchange.faults is not None:
                exchange.faults.hit("before_write")  # the kill trials' and the tests' freeze lands here
            stall.check()  # a process that stalled past its leases sends nothing more (runtime/stall.py)
            if exchange.check is not None:
                exchange.check()
        except BaseException as exc:
            exchange.refused = exc
            self.bare.abort()  # what of the request went is never finished; aiohttp began it: not reused
            raise

    def write(self, data: Any) -> None:
        self._last_check()
        self.bare.write(data)

    def writelines(self, list_of_data: Any) -> None:
        self._last_check()
        self.bare.writelines(list_of_data)

    def write_eof(self) -> None:
        self.bare.write_eof()

    def can_write_eof(self) -> bool:
        return self.bare.can_write_eof()

    def abort(self) -> None:
        self.bare.abort()

    def close(self) -> None:
        self.bare.close()

    def is_closing(self) -> bool:
        return self.bare.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.bare.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self.bare.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self.bare.get_protocol()

    def is_reading(self) -> bool:
        return self.bare.is_reading()

    def pause_reading(self) -> None:
        self.bare.pause_reading()

    def resume_reading(self) -> None:
        self.bare.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.bare.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self.bare.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self.bare.get_write_buffer_limits()


def _bare(transport: asyncio.Transport) -> asyncio.Transport:
    """The connection's own transport: a wrapper is taken off as its request ends, and never wrapped twice."""
    return transport.bare if isinstance(transport, _LastMoment) else transport


def _write_deadline(exchange: _Exchange, wire: Wire) -> None:
    """The write bound ended: bytes of the request still waiting to leave means the write stalled."""
    transport = wire.transport
    if transport is not None and transport.get_write_buffer_size() > 0:
        exchange.write_stalled = True
        transport.abort()


# aiohttp warns of a bytes body past 1 MiB (its write may hold the loop); larger ones go in slices.
_WHOLE = 1 << 20


async def _slices(body: bytes) -> AsyncIterator[memoryview]:
    view = memoryview(body)
    for start in range(0, len(view), _WHOLE):
        yield view[start : start + _WHOLE]


class _Body(httpx.AsyncByteStream):
    def __init__(self, content: bytes) -> None:
        self._content = content

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield self._content


@functools.lru_cache(maxsize=64)
def _bounds(connect: float | None, read: float | None, pool: float | None) -> aiohttp.ClientTimeout:
    # `sock_connect` bounds each connect (TCP, TLS, a proxy's tunnel); `connect` all of them with the pool's
    # share on top, as when aiohttp's own queue (now kept empty by the host's gate) counted in it; `sock_read`
    # each wait for bytes of the answer.
    whole = None if connect is None or pool is None else connect + pool
    return aiohttp.ClientTimeout(total=None, connect=whole, sock_connect=connect, sock_read=read)


def _where(url: httpx.URL) -> tuple[str, str, int]:
    """The host a request goes to, as its gate and its route are kept."""
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


def _aiohttp_url(url: httpx.URL) -> URL:
    """The URL as aiohttp takes it: already encoded by httpx, without credentials (httpx's auth sent them)."""
    return URL(str(url.copy_with(username=None, password=None) if url.userinfo else url), encoded=True)


@dataclass(frozen=True, slots=True)
class Target:
    """Where a request goes, worked out once for a URL (`target`): its host's key and the URL as aiohttp
    takes it."""

    where: tuple[str, str, int]
    url: URL


def target(url: httpx.URL) -> Target:
    """Refused as httpx's own transport refuses it when not http or https."""
    if url.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol(f"Request URL has an unsupported protocol '{url.scheme}://'.")
    return Target(_where(url), _aiohttp_url(url))


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request's parts that do not change with its body (`VendorTransport.prepare`)."""

    method: str
    where: tuple[str, str, int]
    url: URL
    headers: tuple[tuple[str, str], ...]
    length: int  # the index of Content-Length among the headers
    traced: bool  # whether a traceparent is among them


@dataclass(frozen=True, slots=True)
class Answer:
    """An answer as read: the status, the raw headers, the body whole (not decoded)."""

    status: int
    headers: Sequence[tuple[bytes, bytes]]
    content: bytes
    reason: str

    @property
    def encoded(self) -> bool:
        """Whether its body has a Content-Encoding to undo (httpx's Response does: `response()`)."""
        return any(name.lower() == b"content-encoding" and value.strip().lower() != b"identity"
                   for name, value in self.headers)  # fmt: skip

    def response(self) -> httpx.Response:
        """As httpx's transport answers: its body read by `aread`, decoded then."""
        return httpx.Response(
            self.status,
            headers=list(self.headers),
            stream=_Body(self.content),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": self.reason.encode("latin-1", "replace")},
        )


def route(scheme: str, host: str, port: int, proxies: Mapping[str, str]) -> str | None:
    """The proxy a request to scheme://host:port goes through, or None for straight: `proxies` as
    urllib's getproxies_environment() reads them (lowercased keys: http, https, all, no)."""
    proxy = proxies.get(scheme) or proxies.get("all")
    if not proxy or any(_names(entry, host.lower(), port) for entry in proxies.get("no", "").split(",")):
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


def _names(entry: str, host: str, port: int) -> bool:
    """Whether one NO_PROXY entry names the host: `*`, a domain and its subdomains (`example.com`,
    `.example.com`), with or without `:port`, an address, or a network (`10.0.0.0/8`)."""
    entry = entry.strip().lower()
    if entry == "*":
        return True
    if entry.count(":") == 1:  # host:port (an IPv6 address has more colons)
        entry, _, wanted = entry.partition(":")
        if wanted != str(port):
            return False
    entry = entry.strip("[]").lstrip(".")
    if not entry:
        return False
    if "/" in entry:
        try:
            return ipaddress.ip_address(host.strip("[]")) in ipaddress.ip_network(entry, strict=False)
        except ValueError:
            return False
    return host.strip("[]") == entry or host.endswith("." + entry)


@functools.cache
def _verified() -> ssl.SSLContext:
    """The context that verifies servers against certifi's roots, made once a process: OpenSSL 3 spends some
    20-30 ms of CPU making one, and one serves every connection of every pool."""
    return httpx.create_ssl_context(verify=True)


class VendorTransport(httpx.AsyncBaseTransport):
    """httpx's transport interface over one aiohttp session: `limit` connections per vendor host, all of
    which may stay idle (KEEPALIVE_S) for the next request; see the module docstring."""

    def __init__(
        self,
        limit: int,
        keepalive_s: float = KEEPALIVE_S,
        verify: ssl.SSLContext | bool = True,
        faults: Faults | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"a vendor pool needs room for one connection at least, not {limit}")
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._ssl = _verified() if verify is True else httpx.create_ssl_context(verify=verify)
        self._proxies = urllib.request.getproxies_environment()
        self._routes: dict[tuple[str, str, int], str | None] = {}
        self._gates: dict[tuple[str, str, int], asyncio.Semaphore] = {}  # `limit` places a host
        self._session: aiohttp.ClientSession | None = None
        self._connector: _Connector | None = None
        self._closed = False
        self._faults = faults  # tests and kill trials only: `before_write`

    @property
    def opened(self) -> int:
        """Connections made since the start."""
        return 0 if self._connector is None else self._connector.opened

    def counts(self, host: str, port: int) -> tuple[int, int]:
        """(connections held, of them idle) to host:port: for tests and the benchmark (aiohttp's own books)."""
        return (0, 0) if self._connector is None else books(self._connector, host, port)

    def _open(self) -> aiohttp.ClientSession:
        self._connector = _Connector(
            limit=0, limit_per_host=self._limit, keepalive_timeout=self._keepalive_s, ssl=self._ssl
        )
        session = aiohttp.ClientSession(
            connector=self._connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            skip_auto_headers=_NOT_OURS,
            auto_decompress=False,
            trust_env=False,
            # h11's bound on a head is 100 kB; aiohttp's 8 kB a line would refuse answers httpx took.
            max_line_size=65536,
            max_field_size=65536,
            middlewares=(_sent_once,),  # I9
        )
        self._session = session
        return session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return (await self.deliver(request, request.extensions.get(BEFORE_WRITE))).response()

    async def deliver(self, request: httpx.Request, check: LastCheck | None) -> Answer:
        """An httpx.Request sent as `handle_async_request` sends it, with `check` as its last check, answered
        as read (no httpx.Response: tools/vendor_client.py)."""
        to = target(request.url)
        if self._closed:
            raise httpx.ConnectError("the vendor transport is closed")
        body = await request.aread()
        headers = request.headers
        if "transfer-encoding" in headers:  # read whole: sent with its length
            headers = headers.copy()
            del headers["transfer-encoding"]
            headers["content-length"] = str(len(body))
        sent = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in headers.raw]
        return await self._send(
            request.method, to.where, to.url, sent, "traceparent" in headers, body,
            request.extensions.get("timeout", {}), check,
        )  # fmt: skip

    def prepare(self, method: str, url: httpx.URL, headers: Sequence[tuple[str, str]]) -> Prepared:
        """What requests that differ only in their body share, worked out once (a model's steps): the
        URL as aiohttp takes it, the host, and the headers exactly as `handle_async_request` would send
        them for an httpx.Request of these (its Content-Length set per body)."""
        to = target(url)
        shown = httpx.Request(method, url, headers=headers, content=b"").headers
        sent = [(name.decode("latin-1"), value.decode("latin-1")) for name, value in shown.raw]
        length = next(i for i, (name, _) in enumerate(sent) if name.lower() == "content-length")
        return Prepared(method, to.where, to.url, tuple(sent), length, "traceparent" in shown)

    async def send(self, prepared: Prepared, body: bytes, timeouts: Mapping[str, float | None]) -> Answer:
        """A prepared request with this body, as `handle_async_request` sends it (the same pool, gate,
        timeouts, checks and errors), answered as read: no httpx.Request or httpx.Response is made (the
        module's docstring has what that saves)."""
        if self._closed:
            raise httpx.ConnectError("the vendor transport is closed")
        sent = list(prepared.headers)
        sent[prepared.length] = (sent[prepared.length][0], str(len(body)))
        return await self._send(prepared.method, prepared.where, prepared.url, sent, prepared.traced, body,
                                timeouts, None)  # fmt: skip

    async def send_bodiless(
        self,
        method: str,
        to: Target,
        headers: list[tuple[str, str]],
        traced: bool,
        timeouts: Mapping[str, float | None],
        check: LastCheck | None,
    ) -> Answer:
        """A request with no body, its headers as `deliver` would send them for the httpx.Request that was
        not made (tools/vendor_client.py), through the same gate, checks, timeouts and errors."""
        if self._closed:
            raise httpx.ConnectError("the vendor transport is closed")
        return await self._send(method, to.where, to.url, headers, traced, b"", timeouts, check)

    async def _send(
        self,
        method: str,
        where: tuple[str, str, int],
        url: URL,
        sent: list[tuple[str, str]],
        traced: bool,
        body: bytes,
        timeouts: Mapping[str, float | None],
        check: LastCheck | None,
    ) -> Answer:
        session = self._session or self._open()
        proxy = self._routes.get(where, "") if self._proxies else None
        if proxy == "":
            proxy = self._routes[where] = route(*where, self._proxies)
        if tracing.ON and not traced and (parent := tracing.traceparent_now()) is not None:
            sent.append(("traceparent", parent))  # the span this request is made in (runtime/tracing.py)
        gate = self._gates.get(where)
        if gate is None:
            gate = self._gates[where] = asyncio.Semaphore(self._limit)
        if gate.locked():
            await _queued(gate, timeouts.get("pool"), where)
        else:
            await gate.acquire()  # a place is free: taken at once
        if self._closed:  # closed while it waited for its place
            gate.release()
            raise httpx.ConnectError("the vendor transport is closed")
        exchange = _Exchange(check, timeouts.get("write") if body else None, self._faults)
        token = _EXCHANGE.set(exchange)
        try:
            answer = await session.request(
                method,
                url,
                headers=sent,
                data=None if not body else body if len(body) <= _WHOLE else _slices(body),
                allow_redirects=False,  # httpx's client follows them
                proxy=proxy,
                timeout=_bounds(timeouts.get("connect"), timeouts.get("read"), timeouts.get("pool")),
            )
            if exchange.write_timer is not None:
                exchange.write_timer.cancel()  # the answer began: the write is done
            try:
                content = await answer.read()  # at its end the connection goes back to the pool
            except BaseException:
                answer.close()  # half read: closed, never reused
                raise
        except (aiohttp.ClientError, TimeoutError) as exc:
            if exchange.refused is not None:  # aiohttp wraps what the body's task raised: the check's own
                raise exchange.refused from exc
            raise _translated(exc, exchange) from exc
        finally:
            if exchange.write_timer is not None:
                exchange.write_timer.cancel()
            if exchange.guard is not None:
                exchange.guard.unwrap()
            # The guard and the timer point back at the exchange: let go of both, so the request's objects
            # (its check, its call's context) go as it ends rather than with the next garbage collection.
            exchange.guard = exchange.write_timer = None
            _EXCHANGE.reset(token)
            gate.release()  # after the connection went back to the pool (or was closed)
        return Answer(answer.status, answer.raw_headers, content, answer.reason or "")

    async def aclose(self) -> None:
        """Close every connection, idle or in use; requests in flight fail with an httpx error."""
        self._closed = True
        if self._session is not None:
            await self._session.close()

    async def __aenter__(self) -> VendorTransport:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.aclose()


async def _queued(gate: asyncio.Semaphore, pool_s: float | None, where: tuple[str, str, int]) -> None:
    """Wait for a place at the host's gate, at most `pool_s`: httpx.PoolTimeout when none came free."""
    try:
        async with asyncio.timeout(pool_s):
            await gate.acquire()
    except TimeoutError as exc:
        raise httpx.PoolTimeout(f"no connection to {where[1]}:{where[2]} came free in time") from exc


def _translated(exc: BaseException, exchange: _Exchange) -> httpx.TransportError:
    """aiohttp's failure as the httpx error of its phase, as httpx's own transport raises it."""
    message = str(exc) or type(exc).__name__
    if exchange.write_stalled:
        return httpx.WriteTimeout(f"the request's bytes did not all leave within {exchange.write_s} s")
    if isinstance(exc, TimeoutError):  # aiohttp's ConnectionTimeoutError, SocketTimeoutError, ...
        return httpx.ReadTimeout(message) if exchange.connected else httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ClientConnectorError) or not exchange.connected:
        return httpx.ConnectError(message)  # refused, unreachable, DNS, TLS, the transport closed
    if isinstance(exc, aiohttp.ServerDisconnectedError | aiohttp.ClientPayloadError | aiohttp.ClientResponseError):
        return httpx.RemoteProtocolError(message)  # closed before or while answering, or a malformed answer
    return httpx.ReadError(message)  # reset, or closed under the request (the transport closed)
