"""A TCP relay on loopback in front of Postgres, to make the network misbehave on purpose.

A real socket server: connections to it are relayed byte for byte to the target. `pause()` stops
relaying in both directions, on the connections open now and on any opened meanwhile, while every
socket stays open (a stalled network, or a server that stopped answering); `resume()` relays again what
waited. `blackhole()` silences the connections open now for good and lets new ones through (a peer
that went silent: a reconnect gets past it); `cut()` closes the connections open now at once.

`TcpProxy` runs in the test's event loop; `ThreadedProxy` runs one in a thread of its own, for the
synchronous acceptance tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

T = TypeVar("T")
CHUNK = 65536


def retarget(url: str, host: str, port: int) -> str:
    """The same database URL, pointed at another host and port."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@{host}:{port}" if userinfo else f"{host}:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(eq=False)
class _Link:
    """One client connection and its upstream twin."""

    client: asyncio.StreamWriter
    handler: asyncio.Task[None] | None
    upstream: asyncio.StreamWriter | None = None
    silenced: bool = False  # blackholed: never relays again
    pipes: list[asyncio.Task[None]] = field(default_factory=list)

    def abort(self) -> None:
        """Close both sockets now (no flush) and stop relaying."""
        for writer in (self.client, self.upstream):
            if writer is not None:
                writer.transport.abort()
                writer.close()
        for task in self.pipes:
            task.cancel()
        if self.handler is not None:
            self.handler.cancel()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.accepted = 0  # connections accepted so far
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @classmethod
    def before(cls, url: str) -> TcpProxy:
        """A proxy in front of the server a database URL names."""
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None, f"not a TCP database URL: {url}"
        return cls(parts.hostname, parts.port)

    def url(self, url: str) -> str:
        """`url` (of the target) routed through this proxy."""
        return retarget(url, "127.0.0.1", self.port)

    async def start(self) -> TcpProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        links = list(self._links)
        for link in links:
            link.abort()
        handlers = [link.handler for link in links if link.handler is not None]
        if handlers:
            await asyncio.wait(handlers, timeout=5)
        self._links.clear()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    @property
    def open_connections(self) -> int:
        return len(self._links)

    def pause(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def blackhole(self) -> int:
        """Silence the connections open now for good; return how many."""
        for link in self._links:
            link.silenced = True
        return len(self._links)

    def cut(self) -> int:
        """Close the connections open now at once; return how many."""
        links = list(self._links)
        for link in links:
            link.abort()
        return len(links)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        link = _Link(client=writer, handler=asyncio.current_task())
        self._links.add(link)
        try:
            # Nothing reaches the server while paused, not even the connection itself.
            await self._wait_flowing(link)
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
            link.upstream = up_writer
            link.pipes = [
                asyncio.create_task(self._pipe(link, reader, up_writer)),
                asyncio.create_task(self._pipe(link, up_reader, writer)),
            ]
            # Either side closing closes the other: the protocol relayed has no half-closed state.
            await asyncio.wait(link.pipes, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, asyncio.CancelledError):
            pass  # cut, closed, or the target refused: the client sees its socket close
        finally:
            link.handler = None
            link.abort()
            self._links.discard(link)

    async def _wait_flowing(self, link: _Link) -> None:
        while link.silenced or not self._flowing.is_set():
            if link.silenced:
                await asyncio.Event().wait()  # for good: only cut() or close() ends it
            await self._flowing.wait()

    async def _pipe(self, link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while True:
                await self._wait_flowing(link)
                data = await reader.read(CHUNK)
                if not data:
                    return
                await self._wait_flowing(link)  # a chunk read just as the pause began waits for resume
                writer.write(data)
                await writer.drain()


class ThreadedProxy:
    """A `TcpProxy` on an event loop in a thread of its own; each method returns once it took effect."""

    def __init__(self, target_url: str) -> None:
        self.target_url = target_url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tcp-proxy", daemon=True)
        self._proxy: TcpProxy | None = None

    def start(self) -> ThreadedProxy:
        self._thread.start()

        async def start() -> TcpProxy:
            return await TcpProxy.before(self.target_url).start()

        self._proxy = self._call(start)
        return self

    @property
    def proxy(self) -> TcpProxy:
        assert self._proxy is not None, "start the proxy first"
        return self._proxy

    @property
    def url(self) -> str:
        return self.proxy.url(self.target_url)

    def pause(self) -> None:
        self._sync(self.proxy.pause)

    def resume(self) -> None:
        self._sync(self.proxy.resume)

    def blackhole(self) -> int:
        return self._sync(self.proxy.blackhole)

    def cut(self) -> int:
        return self._sync(self.proxy.cut)

    def close(self) -> None:
        if self._proxy is not None:
            self._call(self._proxy.close)
            self._proxy = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def _sync(self, action: Callable[[], T]) -> T:
        async def act() -> T:
            return action()

        return self._call(act)

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        async def run() -> T:
            return await make()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(30)


@contextlib.contextmanager
def threaded_proxy(target_url: str) -> Iterator[ThreadedProxy]:
    """A proxy in front of `target_url` for a synchronous test; always closed at the end."""
    proxy = ThreadedProxy(target_url).start()
    try:
        yield proxy
    finally:
        proxy.close()
