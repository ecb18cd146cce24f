"""The vendor transport (tools/vendor_pool.py: httpx's API over aiohttp's pool) against a real HTTP/1.1
server on a loopback socket: which connection a request gets, what happens to connections the server
closed or a request abandoned, the per-host limit and its queue, the timeouts and errors as httpx's own
transport gives them, what goes out on the wire, the last-moment lease check (I3), no resend (I9) and
closing."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from tests.support.http import TLS
from tests.support.loopback_vendor import Vendor, header_fields, wait_until
from ticketiq.errors import LeaseLost
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext
from ticketiq.tools.http import Send, VendorFailed, request
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import BEFORE_WRITE, VendorTransport


@pytest.fixture
async def vendor() -> AsyncIterator[Vendor]:
    server = await Vendor().start()
    try:
        yield server
    finally:
        await server.close()


class Pooled:
    """A client on a VendorTransport, and what its pool holds for the vendor's origin."""

    def __init__(self, vendor: Vendor, limit: int = 10, keepalive_s: float = 50.0) -> None:
        self.transport = VendorTransport(limit, keepalive_s)
        # The app's client: httpx's requests go through it as they would, tools/http.py's take `exchange`.
        self.client = VendorClient(self.transport, base_url=vendor.url, timeout=5.0)
        self.port = vendor.port

    def counts(self) -> tuple[int, int]:
        """(connections held, of them idle)."""
        return self.transport.counts("127.0.0.1", self.port)

    @property
    def opened(self) -> int:
        return self.transport.opened

    async def get(self, path: str, **kwargs: Any) -> int:
        """The number of the server's connection that answered."""
        response = await self.client.get(path, **kwargs)
        response.raise_for_status()
        return int(response.headers["x-connection"])


@pytest.fixture
async def pooled(vendor: Vendor) -> AsyncIterator[Pooled]:
    made = Pooled(vendor, limit=2)
    try:
        yield made
    finally:
        await made.client.aclose()


async def test_idle_connections_are_used_again_and_none_is_opened_while_one_is_idle(vendor: Vendor) -> None:
    pooled = Pooled(vendor)
    async with pooled.client:
        held = [asyncio.create_task(pooled.get(f"/hold/{name}")) for name in "abc"]
        await vendor.arrived(3)
        answered = []
        for name, task in zip("abc", held, strict=True):
            vendor.release(name)
            answered.append(await task)
        assert pooled.counts() == (3, 3)
        assert {await pooled.get("/ok") for _ in range(6)} <= set(answered)
        assert (pooled.opened, vendor.accepted, pooled.counts()) == (3, 3, (3, 3))


async def test_an_idle_connection_the_server_closed_is_not_used(vendor: Vendor) -> None:
    pooled = Pooled(vendor)
    async with pooled.client:
        first = await pooled.get("/ok")
        vendor.close_idle()
        await wait_until(lambda: not vendor.open)
        second = await pooled.get("/ok")  # succeeds, on a fresh connection
        assert (first, second) == (1, 2)
        assert pooled.counts() == (1, 1)
        assert [number for number, _ in vendor.requests] == [1, 2]


async def test_an_idle_connection_past_its_keep_alive_is_closed_and_not_used(vendor: Vendor) -> None:
    pooled = Pooled(vendor, keepalive_s=0.2)
    async with pooled.client:
        held = [asyncio.create_task(pooled.get(f"/hold/{name}")) for name in "ab"]
        await vendor.arrived(2)
        vendor.release("a")
        a = await held[0]
        b = 3 - a
        await wait_until(lambda: set(vendor.open) == {b})  # a is past its keep-alive: closed; b is in use
        assert pooled.counts() == (1, 0)
        vendor.release("b")
        await held[1]
        await wait_until(lambda: not vendor.open)  # b expired as well
        assert await pooled.get("/ok") == 3  # a new connection
        assert set(vendor.open) == {3}


async def test_the_limit_holds_and_a_waiting_request_gets_the_connection_given_back(
    vendor: Vendor, pooled: Pooled
) -> None:
    a = asyncio.create_task(pooled.get("/hold/a"))
    b = asyncio.create_task(pooled.get("/hold/b"))
    c = asyncio.create_task(pooled.get("/hold/c"))
    await vendor.arrived(2)
    await asyncio.sleep(0.2)
    assert (vendor.accepted, len(vendor.requests), pooled.counts()) == (2, 2, (2, 0))  # c waits
    vendor.release("a")
    on = await a
    await vendor.arrived(3)
    assert vendor.requests[-1] == (on, "/hold/c")  # c came on a's connection
    vendor.release("b")
    vendor.release("c")
    assert await c == on
    await b
    assert (vendor.accepted, pooled.opened, pooled.counts()) == (2, 2, (2, 2))


async def test_a_waiting_request_gets_the_place_of_a_connection_that_failed(vendor: Vendor, pooled: Pooled) -> None:
    a = asyncio.create_task(pooled.get("/hold/a", timeout=httpx.Timeout(5.0, read=0.3)))
    b = asyncio.create_task(pooled.get("/hold/b"))
    await vendor.arrived(2)
    c = asyncio.create_task(pooled.get("/ok"))
    with pytest.raises(httpx.ReadTimeout):
        await a  # a's connection is closed: its place goes to c, on a new connection
    assert await c == 3
    vendor.release("b")
    await b
    assert pooled.counts() == (2, 2)


async def test_no_connection_coming_back_in_time_is_a_pool_timeout_and_the_queue_moves_on(
    vendor: Vendor, pooled: Pooled
) -> None:
    held = [asyncio.create_task(pooled.get(f"/hold/{name}")) for name in "ab"]
    await vendor.arrived(2)
    started = time.monotonic()
    with pytest.raises(httpx.PoolTimeout):
        await pooled.get("/ok", timeout=httpx.Timeout(5.0, pool=0.3))
    assert 0.3 <= time.monotonic() - started < 2.0
    assert len(vendor.requests) == 2  # nothing was sent
    vendor.release("a")
    vendor.release("b")
    await asyncio.gather(*held)
    assert await pooled.get("/ok") in (1, 2)  # the timed-out waiter holds nothing
    assert (pooled.opened, pooled.counts()) == (2, (2, 2))


async def test_a_write_finding_the_pool_full_fails_as_not_reached_and_sends_nothing(vendor: Vendor) -> None:
    # Whichever bound ends the wait first, the pool's (PoolTimeout) or tools/http.py's own asyncio.timeout
    # of the same length, not a byte left: the write is "could not be reached", never uncertain (I9 would
    # otherwise settle a write that was never sent).
    pooled = Pooled(vendor, limit=1)
    settings = Settings(http_timeout_s=0.5, vendor_max_retries=0)
    async with pooled.client:
        held = asyncio.create_task(pooled.get("/hold/a"))
        await vendor.arrived(1)
        ctx = CallContext("run-1", "probe", {}, "k", pooled.client, settings)
        with pytest.raises(VendorFailed) as failed:
            await request(ctx, "probe", "POST", "/ok", send=Send.UNKEYED, json={"n": 1})
        vendor.release("a")
        await held
    assert failed.value.outcome.error is not None
    assert "probe could not be reached" in failed.value.outcome.error
    assert failed.value.outcome.uncertain is False
    assert len(vendor.requests) == 1


async def test_a_request_cancelled_mid_read_leaves_no_connection_behind(vendor: Vendor, pooled: Pooled) -> None:
    reading = asyncio.create_task(pooled.get("/partial"))
    await vendor.arrived(1)
    await asyncio.sleep(0.1)  # the headers and 10 bytes came; the client is reading the rest
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    assert pooled.counts() == (0, 0)  # the half-read connection was closed, not put back
    await wait_until(lambda: not vendor.open)
    assert await pooled.get("/ok") == 2


async def test_a_request_cancelled_waiting_for_its_answer_or_a_connection_leaves_nothing_behind(
    vendor: Vendor,
) -> None:
    pooled = Pooled(vendor, limit=1)
    async with pooled.client:
        answering = asyncio.create_task(pooled.get("/hold/never"))
        await vendor.arrived(1)
        queued = asyncio.create_task(pooled.get("/ok"))
        await asyncio.sleep(0.1)
        queued.cancel()  # cancelled in the queue
        answering.cancel()  # cancelled while its request was out
        for task in (queued, answering):
            with pytest.raises(asyncio.CancelledError):
                await task
        assert pooled.counts() == (0, 0)
        await wait_until(lambda: not vendor.open)
        assert await pooled.get("/ok") == 2
        assert pooled.counts() == (1, 1)


async def test_a_response_goes_back_only_read_to_its_end(vendor: Vendor, pooled: Pooled) -> None:
    # The body is read whole before httpx sees the response: a reader stopping early leaves no half-read
    # connection behind (one cut off mid-read is closed: the cancellation test above).
    async with pooled.client.stream("GET", "/big") as response:
        async for chunk in response.aiter_raw():
            assert len(chunk) == 1_000_000
            break
    assert pooled.counts() == (1, 1)
    assert await pooled.get("/ok") == 1
    assert vendor.accepted == 1


@pytest.mark.parametrize("pooled_transport", [True, False], ids=["vendor_pool", "httpx_default"])
async def test_failures_come_out_as_the_same_httpx_errors_as_httpx_default_pool(
    vendor: Vendor, pooled_transport: bool
) -> None:
    transport = VendorTransport(10) if pooled_transport else httpx.AsyncHTTPTransport()
    heard: list[bytes] = []
    hanging_up = await asyncio.start_server(lambda r, w: hang_up(r, w, heard), "127.0.0.1", 0)
    deaf = await asyncio.start_server(never_read, "127.0.0.1", 0)
    async with hanging_up, deaf, httpx.AsyncClient(verify=TLS, transport=transport, timeout=5.0) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{free_port()}/")
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"{vendor.url}/hold/never", timeout=httpx.Timeout(5.0, read=0.2))
        with pytest.raises(httpx.UnsupportedProtocol):
            await client.get("ftp://127.0.0.1/")
        hanging_up_url = f"http://127.0.0.1:{hanging_up.sockets[0].getsockname()[1]}"
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"{hanging_up_url}/get")
        # I9: a write the server may have taken is never sent again underneath (aiohttp would resend a PUT).
        with pytest.raises(httpx.RemoteProtocolError):
            await client.put(f"{hanging_up_url}/put", json={"n": 1})
        assert [head.split(b" ")[:2] for head in heard] == [[b"GET", b"/get"], [b"PUT", b"/put"]]
        with pytest.raises(httpx.WriteTimeout):  # more than the socket buffers take, and nobody reads it
            await client.post(
                f"http://127.0.0.1:{deaf.sockets[0].getsockname()[1]}/",
                content=b"x" * 64_000_000,
                timeout=httpx.Timeout(5.0, write=0.3),
            )


@pytest.mark.parametrize("pooled_transport", [True, False], ids=["vendor_pool", "httpx_default"])
async def test_a_connect_nobody_answers_is_a_connect_timeout_as_with_httpx_default_pool(pooled_transport: bool) -> None:
    """The connect bound: a host that takes no connection (its SYNs dropped) is httpx.ConnectTimeout
    within the bound, and no connection is counted as made."""
    transport = VendorTransport(10) if pooled_transport else httpx.AsyncHTTPTransport()
    with full_listener() as port:
        async with httpx.AsyncClient(verify=TLS, transport=transport) as client:
            began = time.monotonic()
            with pytest.raises(httpx.ConnectTimeout):
                await client.get(f"http://127.0.0.1:{port}/", timeout=httpx.Timeout(5.0, connect=0.3))
            assert time.monotonic() - began < 3.0  # the bound, not the 5 s read or a SYN retry's
    if isinstance(transport, VendorTransport):
        assert transport.opened == 0


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_request_goes_out_with_exactly_httpx_headers(vendor: Vendor, method: str) -> None:
    sent = {}
    for name, transport in (("httpx", httpx.AsyncHTTPTransport()), ("ours", VendorTransport(10))):
        async with httpx.AsyncClient(verify=TLS, transport=transport, headers={"Authorization": "Bearer k"}) as client:
            answer = await client.request(method, f"{vendor.url}/ok", json={"n": 1} if method == "POST" else None)
            answer.raise_for_status()
        sent[name] = vendor.heads[-1]
    assert sent["ours"] == sent["httpx"]
    assert b"user-agent: python-httpx/" in sent["ours"].lower()
    assert b"aiohttp" not in sent["ours"].lower()


async def test_a_gzip_encoded_answer_is_decoded_once_by_httpx(vendor: Vendor, pooled: Pooled) -> None:
    answer = await pooled.client.get("/gzip")
    assert answer.headers["content-encoding"] == "gzip"
    assert answer.json() == {"answer": "decoded once"}
    assert b"gzip" in next(v for k, _, v in header_fields(vendor.heads[-1]) if k.lower() == b"accept-encoding")


async def test_the_lease_check_runs_as_the_first_byte_is_written_after_the_connection_came_from_the_pool(
    vendor: Vendor,
) -> None:
    pooled = Pooled(vendor, limit=1)
    async with pooled.client:
        await pooled.get("/ok")
        seen: list[tuple[int, int]] = []

        def before_send() -> None:
            seen.append(pooled.counts())

        ctx = CallContext("run-1", "probe", {}, "k", pooled.client, Settings(), before_send)
        await request(ctx, "probe", "GET", "/ok", send=Send.READ)
        # Checked once before the request, idle connection on the stack; then as its bytes go out, taken.
        assert seen == [(1, 1), (1, 0)]

        held = asyncio.create_task(pooled.get("/hold/a"))
        await vendor.arrived(3)
        checks = 0

        def lapses_while_queued() -> None:
            nonlocal checks
            checks += 1
            if checks == 2:
                raise LeaseLost("run-1", "taken over while the request waited for a connection")

        ctx = CallContext("run-1", "probe", {}, "k", pooled.client, Settings(), lapses_while_queued)
        sending = asyncio.create_task(request(ctx, "probe", "POST", "/write", send=Send.UNKEYED, json={}))
        await asyncio.sleep(0.2)
        assert checks == 1  # queued behind a: not checked again until it has a connection
        vendor.release("a")
        await held
        with pytest.raises(LeaseLost):
            await sending
        assert checks == 2
        assert [path for _, path in vendor.requests] == ["/ok", "/ok", "/hold/a"]  # the write was never sent
        # aiohttp had begun the request on it, so its connection is closed rather than reused: not leaked.
        await wait_until(lambda: pooled.counts() == (0, 0))
        assert await pooled.get("/ok") == 2
        assert [path for _, path in vendor.requests] == ["/ok", "/ok", "/hold/a", "/ok"]


async def test_a_request_refused_between_two_of_its_writes_is_cut_off_and_never_whole_at_the_vendor(
    vendor: Vendor,
) -> None:
    """I3, I14: the last check runs at each write of a request's bytes, not only the first: a body written
    in slices (past 1 MiB) whose lease is lost after its first slice went is cut off there, and a request
    that never arrived whole is one the vendor never takes."""
    pooled = Pooled(vendor, limit=1)
    async with pooled.client:
        writes = 0

        def lost_after_the_first_slice() -> None:
            nonlocal writes
            writes += 1
            if writes == 2:
                raise LeaseLost("run-1", "taken over while the body was being written")

        with pytest.raises(LeaseLost):
            await pooled.client.post(
                "/write", content=b"x" * (3 << 20), extensions={BEFORE_WRITE: lost_after_the_first_slice}
            )
        assert writes == 2
        await wait_until(lambda: not vendor.open)  # the connection was aborted under the half-sent request
        assert [path for _, path in vendor.requests] == ["/write"]  # its head came...
        assert vendor.whole == []  # ...its body never did
        assert pooled.counts() == (0, 0)


async def test_closing_the_client_closes_every_socket_idle_or_in_use(vendor: Vendor) -> None:
    pooled = Pooled(vendor)
    held = [asyncio.create_task(pooled.get(f"/hold/{name}")) for name in "abc"]
    await vendor.arrived(3)
    vendor.release("a")
    vendor.release("b")
    await asyncio.gather(*held[:2])
    assert pooled.counts() == (3, 2)
    await pooled.client.aclose()
    await wait_until(lambda: not vendor.open)  # every socket closed, the one in use too
    with pytest.raises(httpx.TransportError):
        await held[2]
    assert pooled.counts() == (0, 0)


async def test_a_request_waiting_for_a_place_when_the_client_closes_fails_as_not_sent(vendor: Vendor) -> None:
    pooled = Pooled(vendor, limit=1)
    held = asyncio.create_task(pooled.get("/hold/a"))
    await vendor.arrived(1)
    waiting = asyncio.create_task(pooled.get("/ok"))
    await asyncio.sleep(0.1)
    await pooled.client.aclose()
    with pytest.raises(httpx.TransportError):
        await held
    with pytest.raises(httpx.ConnectError):  # the place freed by the close is no way out
        await waiting
    assert vendor.requests == [(1, "/hold/a")]


@contextlib.contextmanager
def full_listener() -> Iterator[int]:
    """A port whose listener accepts nothing and whose queue is full: Linux drops the SYN of any further
    connect, which then hangs as a connect to an unreachable host does."""
    with socket.socket() as listener, contextlib.ExitStack() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = int(listener.getsockname()[1])
        for _ in range(8):
            sock = queued.enter_context(socket.socket())
            sock.settimeout(0.3)
            try:
                sock.connect(("127.0.0.1", port))
            except TimeoutError:
                break  # this one hangs: the queue is full
        else:
            pytest.fail("the listener's queue took 8 connects without filling")
        yield port


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, heard: list[bytes]) -> None:
    """A server that reads the request and closes the connection without answering."""
    heard.append(await reader.readuntil(b"\r\n\r\n"))
    writer.close()


async def never_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server that takes the connection and reads nothing until the client hangs up."""
    try:
        await asyncio.sleep(10)
    finally:
        writer.close()
