"""A forward HTTP proxy on loopback, as a company's network puts in front of the internet: it relays what
it is asked to and records each request (`relayed`: "GET http://host:port/path", "CONNECT host:port").

Plain forwarding for http:// targets (absolute-form request line, one request a connection: the answer
goes back with `Connection: close`) and CONNECT tunnels for https:// ones (bytes piped both ways). It runs
in the test's event loop; `forward_proxy()` closes it and every connection it holds, even on failure.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

CHUNK = 65536


@dataclass
class ForwardProxy:
    url: str = ""
    relayed: list[str] = field(default_factory=list)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            method, target, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            self.relayed.append(f"{method} {target}")
            if method == "CONNECT":
                await self._tunnel(target, reader, writer)
            else:
                await self._forward(method, target, head, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _tunnel(self, target: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, _, port = target.rpartition(":")
        up_reader, up_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await writer.drain()
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            up_writer.close()

    async def _forward(
        self, method: str, target: str, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        parts = urlsplit(target)
        lines = head.decode("latin-1").split("\r\n")[1:-2]
        kept = [ln for ln in lines if ln.split(":", 1)[0].strip().lower() not in ("connection", "proxy-connection")]
        length = next((int(ln.split(":", 1)[1]) for ln in kept if ln.lower().startswith("content-length:")), 0)
        body = await reader.readexactly(length) if length else b""
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        upstream = "\r\n".join([f"{method} {path} HTTP/1.1", *kept, "Connection: close", "", ""]).encode("latin-1")
        up_reader, up_writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        try:
            up_writer.write(upstream + body)
            await up_writer.drain()
            await _pipe(up_reader, writer)  # the answer, to the end the server's close marks
        finally:
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.write_eof()


@contextlib.asynccontextmanager
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    proxy = ForwardProxy()
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy.url = f"http://127.0.0.1:{port}"
    try:
        yield proxy
    finally:
        server.close()
        for task in list(proxy._tasks):
            task.cancel()
        await asyncio.gather(*proxy._tasks, return_exceptions=True)
        await server.wait_closed()
