"""What the vendor transport relies on of aiohttp beyond its public API (tools/aiohttp_adapter.py), checked
against a real HTTP/1.1 server on a loopback socket: these fail the day aiohttp changes it, before the
transport's own tests fail in less telling ways. And I9, seen from the wire: a request the server cut off
on a kept-alive connection is never sent again, by aiohttp or the transport."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import httpx
import pytest

from ticketiq.tools.aiohttp_adapter import Connector, Wire, books
from ticketiq.tools.vendor_pool import VendorTransport


class Server:
    """Keep-alive HTTP/1.1: answers every request `ok` on the connection it came on, except `/cut`, which
    it cuts off (the connection closed, no answer) when that connection already answered a request, and
    `/hold`, answered once `release` is set. Keeps (connection number, path) of each request as it came."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, str]] = []
        self.accepted = 0
        self.release = asyncio.Event()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        number, answered = self.accepted, 0
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ")[1].decode()
                self.seen.append((number, path))
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                await reader.readexactly(length)
                if path == "/cut" and answered:
                    return
                if path == "/hold":
                    await self.release.wait()
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                await writer.drain()
                answered += 1
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    async with Server() as started:
        yield started


class Heard(Connector):
    """The adapter's connector, keeping what it was told and putting a recording transport on each wire."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.admitted = 0
        self.wires: list[Wire] = []
        self.written: list[bytes] = []

    def admit(self) -> None:
        self.admitted += 1

    def taken(self, wire: Wire) -> None:
        self.wires.append(wire)
        bare = wire.transport.bare if isinstance(wire.transport, Recorder) else wire.transport
        assert bare is not None
        wire.transport = Recorder(bare, self.written)


class Recorder(asyncio.Transport):
    """A connection's transport that keeps each write and passes everything on."""

    def __init__(self, bare: asyncio.Transport, written: list[bytes]) -> None:
        super().__init__()
        self.bare = bare
        self.written = written

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))
        self.bare.write(data)

    def writelines(self, list_of_data: Any) -> None:
        chunks = [bytes(chunk) for chunk in list_of_data]
        self.written.extend(chunks)
        self.bare.writelines(chunks)


def _forward(name: str) -> Callable[..., Any]:
    def forwarded(self: Recorder, *args: Any) -> Any:
        return getattr(self.bare, name)(*args)

    return forwarded


for _name in [n for n in vars(asyncio.Transport) | vars(asyncio.BaseTransport) if not n.startswith("_")]:
    if _name not in ("write", "writelines"):
        setattr(Recorder, _name, _forward(_name))


def test_connect_is_called_as_the_adapter_overrides_it() -> None:
    """The hook's signature is aiohttp's; middlewares are a session option."""
    parameters = list(inspect.signature(aiohttp.TCPConnector.connect).parameters)
    assert parameters == ["self", "req", "traces", "timeout"]
    assert "middlewares" in inspect.signature(aiohttp.ClientSession).parameters


async def test_each_request_asks_connect_and_its_bytes_go_through_the_wires_transport(server: Server) -> None:
    connector = Heard(limit_per_host=4)
    async with aiohttp.ClientSession(connector=connector) as session:
        for path in ("/one", "/two"):
            async with session.get(server.url + path) as answer:
                assert await answer.read() == b"ok"
        assert books(connector, "127.0.0.1", server.port) == (1, 1)  # one connection, idle
        assert books(connector, "127.0.0.1", server.port + 1) == (0, 0)
        held = asyncio.ensure_future(session.get(server.url + "/hold"))
        while len(server.seen) < 3:
            await asyncio.sleep(0.01)
        assert books(connector, "127.0.0.1", server.port) == (1, 0)  # held while its answer is awaited
        server.release.set()
        async with await held as answer:
            assert await answer.read() == b"ok"
    assert (connector.admitted, len(connector.wires), connector.opened) == (3, 3, 1)
    assert connector.wires[0] is connector.wires[1] is connector.wires[2]  # the idle one taken again
    assert server.seen == [(1, "/one"), (1, "/two"), (1, "/hold")]
    sent = b"".join(connector.written)
    assert sent.count(b"GET /") == 3  # every byte of every request went through the wire's transport
    assert sent.startswith(b"GET /one HTTP/1.1\r\n")
    assert books(connector, "127.0.0.1", server.port) == (0, 0)  # closed


async def test_a_new_connection_is_counted_once_it_is_made(server: Server) -> None:
    connector = Heard(limit_per_host=4)
    async with aiohttp.ClientSession(connector=connector) as session:
        held = [asyncio.ensure_future(session.get(server.url + "/hold")) for _ in range(3)]
        while len(server.seen) < 3:  # all three held at once
            await asyncio.sleep(0.01)
        server.release.set()
        for answer in await asyncio.gather(*held):
            assert await answer.read() == b"ok"
        async with session.get(server.url + "/again") as answer:  # an idle one of the three
            await answer.read()
    assert (connector.opened, server.accepted) == (3, 3)


async def test_aiohttp_sends_a_cut_off_request_again_through_the_middlewares_and_connect(server: Server) -> None:
    """What I9 guards against, as aiohttp does it: a GET the server cut off on a kept-alive connection is
    sent again on a new one, and that second try passes through the session's middlewares and the
    connector's connect, where the vendor transport stops it."""
    tries: list[str] = []

    async def counted(request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType) -> aiohttp.ClientResponse:
        tries.append(request.url.path)
        return await handler(request)

    connector = Heard(limit_per_host=4)
    async with aiohttp.ClientSession(connector=connector, middlewares=(counted,)) as session:
        for path in ("/first", "/cut"):
            async with session.get(server.url + path) as answer:
                assert await answer.read() == b"ok"
    assert server.seen == [(1, "/first"), (1, "/cut"), (2, "/cut")]
    assert tries == ["/first", "/cut", "/cut"]
    assert connector.admitted == 3


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
async def test_the_vendor_transport_never_sends_a_cut_off_request_again(server: Server, method: str) -> None:
    async with VendorTransport(4) as transport, httpx.AsyncClient(transport=transport) as client:
        assert (await client.get(server.url + "/first")).text == "ok"
        with pytest.raises(httpx.RemoteProtocolError) as caught:
            await client.request(method, server.url + "/cut", content=b"{}" if method == "PUT" else None)
    assert server.seen == [(1, "/first"), (1, "/cut")]
    assert (server.accepted, transport.opened) == (1, 1)
    assert isinstance(caught.value.__cause__, aiohttp.ServerDisconnectedError)
    assert "not sent again" not in str(caught.value)  # the cut's own failure, not the refused second connect
