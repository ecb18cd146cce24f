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


@pytest.mark.parametrize(("method", "path", "headers"), [
    ("GET", "/ok", {"Authorization": "Bearer k"}),
    ("GET", "/gzip", {"Accept": "application/json", "authorization": "Basic a2V5"}),  # a default overridden
    ("POST", "/write", {"Authorization": "Bearer k"}),  # no body: httpx sends Content-Length: 0
    ("GET", "/ok", None),
])  # fmt: skip
async def test_a_request_without_a_body_goes_out_as_httpx_would_send_it_without_an_httpx_request(
    vendor: Vendor, method: str, path: str, headers: dict[str, str] | None
) -> None:
    """The short way (no JSON body, no params, no hook but the client's own): the same bytes on the wire as
    httpx's own client and transport send, the same reply, the client's `before_send` and the last check run,
    and httpx's build_request never called; a hook of anyone else's makes it take httpx's way, hook and all."""
    sent: dict[str, bytes] = {}
    replies: dict[str, Any] = {}
    checked: list[str] = []
    before: list[str] = []
    options: dict[str, Any] = {"headers": {"User-Agent": "ticketiq/test", "X-Default": "d"}, "timeout": 5.0}
    ours = _CountingBuilds(VendorTransport(10), before_send=lambda: before.append("ours"), **options)
    theirs = httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(), **options)
    for name, client in (("httpx", theirs), ("ours", ours)):
        async with client:
            ctx = CallContext("run-1", "probe", {}, "k", client, Settings(), functools.partial(checked.append, name))
            for _ in range(2):  # the second with the merged headers kept
                replies[name] = await request(ctx, "probe", method, f"{vendor.url}{path}", send=Send.READ,
                                              headers=headers)  # fmt: skip
                sent.setdefault(name, vendor.heads[-1])
                assert vendor.heads[-1] == sent[name]
    assert sent["ours"] == sent["httpx"]
    assert sent["ours"].startswith(f"{method} {path} HTTP/1.1\r\nHost: ".encode())
    assert (b"\r\ncontent-length: 0\r\n" in sent["ours"].lower()) is (method == "POST")
    assert replies["ours"].status == replies["httpx"].status == 200
    assert replies["ours"].body == replies["httpx"].body == ({"answer": "decoded once"} if path == "/gzip" else "ok")
    assert ours.builds == 0
    assert before == ["ours", "ours"]
    assert checked.count("ours") == 4  # before each try, and as its bytes were written

    hooked: list[str] = []
    hooking = _CountingBuilds(VendorTransport(10), before_send=lambda: before.append("hooking"),
                              event_hooks={"request": [lambda r: _hooked(hooked, r)]}, **options)  # fmt: skip
    async with hooking:
        ctx = CallContext("run-1", "probe", {}, "k", hooking, Settings(), lambda: None)
        await request(ctx, "probe", method, f"{vendor.url}{path}", send=Send.READ, headers=headers)
    assert vendor.heads[-1] == sent["httpx"]
    assert (hooking.builds, hooked, before[-1]) == (1, [method], "hooking")

    def stalled() -> None:
        raise RuntimeError("this process stalled")  # as runtime/stall.py's check refuses

    seen = len(vendor.heads)
    async with VendorClient(VendorTransport(10), before_send=stalled, **options) as refusing:
        with pytest.raises(RuntimeError, match="stalled"):
            await refusing.exchange(method, f"{vendor.url}{path}", headers=headers, json=None, params=None,
                                    phase_s=5.0, check=lambda: None)  # fmt: skip
    assert len(vendor.heads) == seen  # nothing went out


async def _hooked(hooked: list[str], request: httpx.Request) -> None:
    hooked.append(request.method)


class _CountingSends(VendorClient):
    sends = 0

    async def send(self, request: httpx.Request, **kwargs: Any) -> httpx.Response:
        self.sends += 1
        return await super().send(request, **kwargs)


class _CountingBuilds(VendorClient):
    builds = 0

    def build_request(self, *args: Any, **kwargs: Any) -> httpx.Request:
        self.builds += 1
        return super().build_request(*args, **kwargs)
