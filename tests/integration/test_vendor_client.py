"""The adapters' client (tools/vendor_client.py: VendorClient.exchange) against httpx's own client and
transport, on a real HTTP/1.1 server on a loopback socket: what goes out on the wire and what is read back
through tools/http.py's `request`, byte for byte the same."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.loopback_vendor import Vendor
from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext
from ticketiq.tools.http import Send, request
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport


@pytest.fixture
async def vendor() -> AsyncIterator[Vendor]:
    server = await Vendor().start()
    try:
        yield server
    finally:
        await server.close()


@pytest.mark.parametrize(("method", "path", "body"), [
    ("GET", "/ok", None), ("GET", "/gzip", None), ("POST", "/write", {"note": "é", "n": [1, 2]}),
])  # fmt: skip
async def test_an_adapters_request_goes_out_and_reads_back_as_through_httpx_own_client(
    vendor: Vendor, method: str, path: str, body: Any
) -> None:
    """tools/http.py's request on the app's client (VendorClient.exchange) against the same request through
    httpx's own client and transport: the same bytes on the wire (the client's default headers, the
    params, the JSON body), the same reply read (a JSON body parsed, a gzip-encoded one decoded, a plain
    one kept as text), the client's request hooks run, the last check run as the bytes went."""
    sent: dict[str, bytes] = {}
    replies: dict[str, Any] = {}
    hooked: list[str] = []
    checked: list[str] = []
    options: dict[str, Any] = {"headers": {"User-Agent": "ticketiq/test"}, "timeout": 5.0,
                               "event_hooks": {"request": [lambda r: _hooked(hooked, r)]}}  # fmt: skip
    ours = _CountingSends(VendorTransport(10), **options)
    theirs = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(), **options)
    for name, client in (("httpx", theirs), ("ours", ours)):
        async with client:
            ctx = CallContext("run-1", "probe", {}, "k", client, Settings(), functools.partial(checked.append, name))
            replies[name] = await request(ctx, "probe", method, f"{vendor.url}{path}", send=Send.READ,
                                          headers={"Authorization": "Bearer k"}, json=body,
                                          params={"startAt": 0, "q": "a b"})  # fmt: skip
        sent[name] = vendor.heads[-1]
    assert sent["ours"] == sent["httpx"]
    assert b"?startAt=0&q=a+b " in sent["ours"]
    assert b"user-agent: ticketiq/test" in sent["ours"].lower()
    assert replies["ours"].status == replies["httpx"].status == 200
    assert replies["ours"].body == replies["httpx"].body == ({"answer": "decoded once"} if path == "/gzip" else "ok")
    assert [k for k in replies["ours"].headers if k != "x-connection"] == [
        k for k in replies["httpx"].headers if k != "x-connection"
    ]
    assert ours.sends == 0  # the short way: never through httpx's client.send
    assert hooked == [method, method]
    # Once before the try (before_send), then as its bytes were written (tools/http.py: last_check): by the
    # transport's one write of them for ours, by httpcore's trace before the head and again the body for httpx's.
    assert checked.count("ours") == 2
    assert checked.count("httpx") == 3


async def _hooked(hooked: list[str], request: httpx.Request) -> None:
    hooked.append(request.method)


class _CountingSends(VendorClient):
    sends = 0

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        self.sends += 1
        return await super().send(request, **kwargs)
