"""The test TCP proxy itself: it relays, pauses both ways and resumes, silences or cuts the connections
open now while new ones get through. Real sockets: an echo server behind it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support.tcp_proxy import TcpProxy, retarget, threaded_proxy


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1024):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


@pytest.fixture
async def proxy() -> AsyncIterator[TcpProxy]:
    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = int(server.sockets[0].getsockname()[1])
    proxied = await TcpProxy("127.0.0.1", port).start()
    try:
        yield proxied
    finally:
        await proxied.close()
        server.close()
        await server.wait_closed()


async def ask(proxy: TcpProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", proxy.port)


async def answer(reader: asyncio.StreamReader, within_s: float = 5.0) -> bytes:
    return await asyncio.wait_for(reader.read(1024), within_s)


async def test_it_relays_both_ways(proxy: TcpProxy) -> None:
    reader, writer = await ask(proxy)
    writer.write(b"ping")
    assert await answer(reader) == b"ping"
    writer.close()


async def test_paused_it_relays_nothing_and_resumed_it_delivers_what_waited(proxy: TcpProxy) -> None:
    reader, writer = await ask(proxy)
    proxy.pause()
    writer.write(b"held")
    with pytest.raises(TimeoutError):
        await answer(reader, within_s=0.3)
    late_reader, late_writer = await ask(proxy)  # a connection made while paused waits as well
    late_writer.write(b"late")
    with pytest.raises(TimeoutError):
        await answer(late_reader, within_s=0.3)
    proxy.resume()
    assert await answer(reader) == b"held"
    assert await answer(late_reader) == b"late"
    writer.close()
    late_writer.close()


async def test_a_blackholed_connection_stays_open_and_silent_while_new_ones_get_through(proxy: TcpProxy) -> None:
    reader, writer = await ask(proxy)
    writer.write(b"1")
    assert await answer(reader) == b"1"
    assert proxy.blackhole() == 1
    writer.write(b"2")
    with pytest.raises(TimeoutError):
        await answer(reader, within_s=0.3)
    assert not reader.at_eof()
    fresh_reader, fresh_writer = await ask(proxy)
    fresh_writer.write(b"3")
    assert await answer(fresh_reader) == b"3"
    writer.close()
    fresh_writer.close()


async def test_a_cut_closes_the_connections_open_now_at_once(proxy: TcpProxy) -> None:
    reader, writer = await ask(proxy)
    writer.write(b"1")
    assert await answer(reader) == b"1"
    assert proxy.cut() == 1
    try:
        ended = await answer(reader)
    except ConnectionError:
        ended = b""  # a reset ends it as well as an orderly close
    assert ended == b""
    writer.close()
    fresh_reader, fresh_writer = await ask(proxy)
    fresh_writer.write(b"2")
    assert await answer(fresh_reader) == b"2"
    fresh_writer.close()


def test_a_threaded_proxy_serves_a_synchronous_caller(db_url: str) -> None:
    import psycopg

    with threaded_proxy(db_url) as proxy:
        assert proxy.url == retarget(db_url, "127.0.0.1", proxy.proxy.port)
        with psycopg.connect(proxy.url, autocommit=True) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            proxy.pause()
            proxy.resume()
            assert conn.execute("SELECT 2").fetchone() == (2,)
