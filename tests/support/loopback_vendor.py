"""A real HTTP/1.1 keep-alive server on a loopback socket, for the vendor transport's and client's tests
(tests/integration/test_vendor_pool.py, test_vendor_client.py): each answer names the connection it came
on, and every request's head is kept as it came."""

from __future__ import annotations

import asyncio
import gzip
import time
from typing import Any


class Vendor:
    """An HTTP/1.1 keep-alive server. Each answer names the connection it came on (`x-connection`).

    GET /ok answers at once; GET /hold/<name> answers once the test calls release(name); GET /partial
    sends its headers and 10 of 1000 body bytes, then nothing; GET /big sends 1 MB; GET /gzip sends a
    gzip-encoded JSON body. Every request's head is kept, as it came, in `heads`."""

    def __init__(self) -> None:
        self.accepted = 0
        self.requests: list[tuple[int, str]] = []  # (connection, path) as they arrived
        self.heads: list[bytes] = []
        self.whole: list[str] = []  # paths of the requests whose bodies came in whole
        self.open: dict[int, asyncio.StreamWriter] = {}
        self.idle: set[int] = set()
        self._gates: dict[str, asyncio.Event] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> Vendor:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gate(self, name: str) -> asyncio.Event:
        return self._gates.setdefault(name, asyncio.Event())

    def release(self, name: str) -> None:
        self.gate(name).set()

    def close_idle(self) -> None:
        """The server ends its idle keep-alive connections (as its keep-alive timeout would)."""
        for number in list(self.idle):
            self.open[number].close()

    async def arrived(self, count: int) -> None:
        await wait_until(lambda: len(self.requests) >= count)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self.accepted += 1
        number = self.accepted
        self.open[number] = writer
        try:
            while True:
                self.idle.add(number)
                head = await reader.readuntil(b"\r\n\r\n")
                self.idle.discard(number)
                path = head.split(b" ")[1].decode()
                self.requests.append((number, path))
                self.heads.append(head)
                length = next((int(v) for k, _, v in header_fields(head) if k.lower() == b"content-length"), 0)
                await reader.readexactly(length)
                self.whole.append(path)
                await self._answer(number, path, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client closed the connection
        finally:
            self.idle.discard(number)
            del self.open[number]
            writer.close()
            self._handlers.discard(task)

    async def _answer(self, number: int, path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        path = path.partition("?")[0]  # a query changes no answer
        headers = f"HTTP/1.1 200 OK\r\nx-connection: {number}\r\n"
        if path == "/partial":
            writer.write(f"{headers}content-length: 1000\r\n\r\n".encode() + b"x" * 10)
            await writer.drain()
            await self._unless_hung_up(reader, asyncio.Event())  # the rest never comes
        if path == "/gzip":
            headers += "content-encoding: gzip\r\ncontent-type: application/json\r\n"
        body = b"x" * 1_000_000 if path == "/big" else GZIPPED if path == "/gzip" else b"ok"
        if path.startswith("/hold/"):
            await self._unless_hung_up(reader, self.gate(path.removeprefix("/hold/")))
        writer.write(f"{headers}content-length: {len(body)}\r\n\r\n".encode() + body)
        await writer.drain()

    @staticmethod
    async def _unless_hung_up(reader: asyncio.StreamReader, gate: asyncio.Event) -> None:
        """Wait for the gate; the client closing the connection meanwhile ends the connection."""
        hung_up = asyncio.ensure_future(reader.read(1))
        opened = asyncio.ensure_future(gate.wait())
        await asyncio.wait({hung_up, opened}, return_when=asyncio.FIRST_COMPLETED)
        for waiting in (hung_up, opened):
            waiting.cancel()
        await asyncio.gather(hung_up, opened, return_exceptions=True)
        if not opened.done() or opened.cancelled():
            raise ConnectionResetError("the client hung up")

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self.open.values()):
            writer.close()  # each handler then reads the end of its stream and returns
        await asyncio.wait_for(asyncio.gather(*self._handlers), 5.0)
        await self._server.wait_closed()


GZIPPED = gzip.compress(b'{"answer": "decoded once"}')


def header_fields(head: bytes) -> list[tuple[bytes, bytes, bytes]]:
    return [line.partition(b": ") for line in head.split(b"\r\n")[1:] if line]


async def wait_until(condition: Any, within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)
