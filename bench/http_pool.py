"""CPU and wall time per vendor GET, and connections opened, for httpx's default pool and the vendor transport.

    .venv/bin/python bench/http_pool.py [--gets 2000] [--rounds 400] [--concurrent 64]

The server is uvicorn in a child process on a loopback socket (its CPU is not counted here), answering
every GET with 2 bytes. For each transport, in the same run:

- 1 idle: sequential GETs on a client holding one idle connection;
- 64 idle: 64 concurrent GETs first (64 connections opened), then sequential GETs; the idle count the
  pool kept is printed beside it;
- churn: `--rounds` rounds of 64 concurrent GETs (as 64 runs in flight), with the connections opened
  over them (httpcore's trace, `connection.connect_tcp.complete`; the vendor transport's own count) and
  the CPU per GET.

Every row is an httpx.AsyncClient's `get`: the transports differ, the API measured is the same.

CPU is time.process_time() of this process, wall is time.perf_counter(), both divided by the GETs. It
prints figures and asserts nothing (issue 19).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent.parent / "src"))

from ticketiq.tools.vendor_pool import VendorTransport

BODY = b"ok"


async def app(
    scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]
) -> None:
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": BODY})


def serve(port: int) -> None:
    import uvicorn

    # Idle connections stay open through the whole bench: only the client's pool closes them.
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", timeout_keep_alive=600, backlog=4096)


class Opened:
    """httpcore's trace hook: counts the TCP connections made."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            self.count += 1


Transport = Callable[[], httpx.AsyncBaseTransport]

TRANSPORTS: dict[str, Transport] = {
    # What process.py built before issue 19.
    "httpx default (keep-alive 20)": lambda: httpx.AsyncHTTPTransport(),
    "httpx, keep-alive 100": lambda: httpx.AsyncHTTPTransport(
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=100)
    ),
    "vendor transport (aiohttp, 100/host)": lambda: VendorTransport(100),
}


def idle_connections(transport: httpx.AsyncBaseTransport, port: int) -> int:
    if isinstance(transport, VendorTransport):
        return transport.counts("127.0.0.1", port)[1]
    pool = transport._pool  # type: ignore[attr-defined]  # httpx's own pool, for the figure only
    return sum(1 for c in pool.connections if c.is_idle())


async def sequential(client: httpx.AsyncClient, url: str, gets: int) -> tuple[float, float]:
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(gets):
        (await client.get(url)).raise_for_status()
    return (time.process_time() - cpu) / gets, (time.perf_counter() - wall) / gets


async def concurrent(client: httpx.AsyncClient, url: str, width: int, opened: Opened) -> None:
    answers = await asyncio.gather(*(client.get(url, extensions={"trace": opened}) for _ in range(width)))
    for answer in answers:
        answer.raise_for_status()


async def measure(name: str, make: Transport, url: str, args: argparse.Namespace) -> dict[str, Any]:
    row: dict[str, Any] = {"transport": name}
    transport = make()
    async with httpx.AsyncClient(transport=transport, timeout=15.0) as client:
        await sequential(client, url, args.gets // 10)  # untimed: the first transport measured pays no warm-up
        row["idle1"] = await sequential(client, url, args.gets)
    transport = make()
    async with httpx.AsyncClient(transport=transport, timeout=15.0) as client:
        await concurrent(client, url, args.concurrent, Opened())
        row["kept"] = idle_connections(transport, httpx.URL(url).port or 80)
        row["idle64"] = await sequential(client, url, args.gets)
    transport = make()
    opened = Opened()
    async with httpx.AsyncClient(transport=transport, timeout=15.0) as client:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(args.rounds):
            await concurrent(client, url, args.concurrent, opened)
        gets = args.rounds * args.concurrent
        row["churn"] = ((time.process_time() - cpu) / gets, (time.perf_counter() - wall) / gets)
        row["opened"] = transport.opened if isinstance(transport, VendorTransport) else opened.count
    return row


def wait_for_port(port: int, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ms(pair: tuple[float, float]) -> str:
    return f"{pair[0] * 1000:6.3f} / {pair[1] * 1000:6.3f}"


async def measure_all(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    return [await measure(name, make, url, args) for name, make in TRANSPORTS.items()]


def main(args: argparse.Namespace) -> None:
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        wait_for_port(port)
        rows = asyncio.run(measure_all(f"http://127.0.0.1:{port}/ok", args))
    finally:
        server.terminate()  # only the child this started, by its pid
        server.wait(10)
    print(f"per GET, CPU ms / wall ms ({args.gets} sequential GETs; churn: {args.rounds} rounds of {args.concurrent})")
    print(f"{'transport':36} {'1 idle':>17} {'64 idle':>17} {'idle kept':>9} {'churn':>17} {'opened':>7}")
    for row in rows:
        print(
            f"{row['transport']:36} {ms(row['idle1']):>17} {ms(row['idle64']):>17} {row['kept']:>9} "
            f"{ms(row['churn']):>17} {row['opened']:>7}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gets", type=int, default=2000, help="sequential GETs per measure")
    parser.add_argument("--rounds", type=int, default=400, help="rounds of concurrent GETs for the churn")
    parser.add_argument("--concurrent", type=int, default=64, help="GETs in flight at once")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parsed = parser.parse_args()
    if parsed.serve is not None:
        serve(parsed.serve)
    else:
        main(parsed)
