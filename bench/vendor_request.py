"""CPU per vendor request: an adapter's read as the app sends it, beside httpx's own send and a bare floor.

    .venv/bin/python bench/vendor_request.py [--requests 2000] [--rounds 3]

A Jira-shaped JSON answer (about 1 kB) comes from a FastAPI server in a child process, so the CPU counted
here (time.process_time) is the client's alone. Each path reads the same URL, one request after another
on one kept-alive connection, after a warm-up:

- `client.request`: httpx's AsyncClient on the app's VendorTransport (tools/vendor_pool.py), the answer
  parsed by `Response.json()`, alone;
- `adapter on httpx`: tools/http.py's `request` (the lease check and the retry rules around the send) on
  that httpx client: what an adapter's `jira_get_issue` paid before VendorClient;
- `adapter request`: the same on the app's VendorClient (tools/vendor_client.py), its `exchange`: what
  an adapter's `jira_get_issue` pays now, reading an issue again (its URL parsed once);
- `adapter, new URL`: the same, each request a different issue (its URL parsed each time);
- `floor`: a bare aiohttp session, the answer parsed by orjson: what any client must pay.

Rounds alternate the paths, so drift shows as spread. Prints figures (microseconds of CPU a request,
with the machine's cores) and the ratios in the same run; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import aiohttp
import httpx
import orjson

from child_server import serving
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext
from ticketiq.tools.http import Send, request
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport

_SERVER = """
import json, sys, uvicorn
from fastapi import FastAPI, Response
app = FastAPI()
body = json.dumps({"key": "OPS-1", "fields": {"summary": "s" * 200, "description": "d" * 700,
                   "status": {"name": "Open"}, "labels": ["ops", "billing"]}}).encode()
@app.get("/rest/api/3/issue/{key}")
async def issue(key: str) -> Response:
    return Response(body, media_type="application/json")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""

HEADERS = {"Authorization": "Basic Ym90OnRva2Vu", "Accept": "application/json"}


async def cpu_us(ask: Callable[[], Awaitable[object]], requests: int) -> float:
    """Microseconds of this process's CPU a request, after a warm-up."""
    for _ in range(max(50, requests // 10)):
        await ask()
    started = time.process_time()
    for _ in range(requests):
        await ask()
    return (time.process_time() - started) * 1e6 / requests


async def measure(url: str, requests: int, rounds: int) -> None:
    settings = Settings()
    options = {"timeout": settings.http_timeout_s, "headers": {"User-Agent": "ticketiq/bench"}}
    plain = httpx.AsyncClient(transport=VendorTransport(4), **options)  # type: ignore[arg-type]
    app = VendorClient(VendorTransport(4), before_send=lambda: None, **options)
    bare = aiohttp.ClientSession()
    ctx = CallContext("run-bench", "jira_get_issue", {"issue_key": "OPS-1"}, "k", app, settings)
    before = CallContext("run-bench", "jira_get_issue", {"issue_key": "OPS-1"}, "k", plain, settings)

    async def through_httpx() -> object:
        return (await plain.request("GET", url, headers=HEADERS, timeout=settings.http_timeout_s)).json()

    async def adapter() -> object:
        return (await request(ctx, "jira", "GET", url, send=Send.READ, headers=HEADERS)).body

    issued = iter(range(10**9))

    async def adapter_new_url() -> object:
        fresh = url.replace("OPS-1", f"OPS-{next(issued)}")
        return (await request(ctx, "jira", "GET", fresh, send=Send.READ, headers=HEADERS)).body

    async def adapter_on_httpx() -> object:
        return (await request(before, "jira", "GET", url, send=Send.READ, headers=HEADERS)).body

    async def floor() -> object:
        async with bare.get(url, headers=HEADERS) as answer:
            return orjson.loads(await answer.read())

    paths = {"client.request": through_httpx, "adapter on httpx": adapter_on_httpx, "adapter request": adapter,
             "adapter, new URL": adapter_new_url, "floor": floor}  # fmt: skip
    figures: dict[str, list[float]] = {path: [] for path in paths}
    try:
        print(f"{os.cpu_count()} cores, httpx {httpx.__version__}, aiohttp {aiohttp.__version__}, "
              f"{requests} requests a path and round, CPU of this process (us) a request")  # fmt: skip
        print(f"{'round':<6} " + " ".join(f"{path:>16}" for path in paths))
        for round_ in range(1, rounds + 1):
            for path, ask in paths.items():
                figures[path].append(await cpu_us(ask, requests))
            print(f"{round_:<6} " + " ".join(f"{figures[path][-1]:>16.0f}" for path in paths))
        median = {path: statistics.median(values) for path, values in figures.items()}
        print(f"{'median':<6} " + " ".join(f"{median[path]:>16.0f}" for path in paths))
        print(f"adapter request / adapter on httpx: {median['adapter request'] / median['adapter on httpx']:.2f} "
              f"({median['adapter, new URL'] / median['adapter on httpx']:.2f} a new URL each time); "
              f"adapter request / floor: {median['adapter request'] / median['floor']:.2f}")  # fmt: skip
    finally:
        await plain.aclose()
        await app.aclose()
        await bare.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with serving(_SERVER, "/rest/api/3/issue/OPS-1") as base:
        asyncio.run(measure(base + "/rest/api/3/issue/OPS-1", args.requests, args.rounds))


if __name__ == "__main__":
    main()
