"""The adapters' HTTP client: httpx's AsyncClient on a VendorTransport, with a short way for their requests.

Every vendor request of an adapter goes through tools/http.py's `request`, which wants four things of an
answer: its status, its headers, its body whole and decoded, and nothing more. Through httpx's
`client.request` a GET cost 640-790 us of CPU against a local server, of which the client's own send
(auth and redirect flows, event hooks, cookies, the httpx.Response and its `aread`) was some 200-350 us:
as much as the request itself on aiohttp (bench/vendor_request.py measures both). `exchange` keeps
what the request is, exactly: httpx's `build_request` makes it (the client's base URL, default headers,
params, JSON body and timeout, as `client.request` would have sent them, byte for byte), the client's
request hooks run on it (the stall check), and the transport sends it with its last check (I3, I14).
Only the answer is read the short way: an `Answered`, made an httpx.Response only when its body has a
Content-Encoding for httpx to undo.

What `exchange` leaves out of `client.request`, on purpose: cookies a vendor sets are not kept (one client
serves every run of every tenant; none of our vendors authenticates by cookie, and a cookie of one
tenant's answer sent with another's request would be a leak), redirects are not followed (the client
does not follow them either: httpx's default), and a closed client's request fails as the closed
transport's httpx.ConnectError (nothing sent) rather than httpx's RuntimeError.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import httpx

from ticketiq.tools.vendor_pool import LastCheck, VendorTransport


@dataclass(frozen=True, slots=True)
class Answered:
    """An answer as an adapter reads it: its body whole and decoded."""

    status: int
    headers: httpx.Headers
    content: bytes

    @property
    def text(self) -> str:
        """The body as text, decoded by its charset as httpx decodes it (utf-8 when it names none)."""
        return httpx.Response(self.status, headers=self.headers, content=self.content).text


class VendorClient(httpx.AsyncClient):
    """httpx's client on one VendorTransport: every httpx use keeps working (the A2A SDK's, the app-token
    grant's), and the adapters' requests take `exchange` (the module's docstring)."""

    def __init__(self, transport: VendorTransport, **options: Any) -> None:
        super().__init__(transport=transport, **options)
        self.vendor = transport

    async def exchange(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None,
        json: Any,
        params: Any,
        phase_s: float,
        check: LastCheck,
    ) -> Answered:
        """One try of an adapter's request; `phase_s` bounds each phase (connect, pool, write, read) as
        httpx's `timeout` does."""
        request = self.build_request(method, _parsed(url), headers=headers, json=json, params=params, timeout=phase_s)
        for hook in self.event_hooks["request"]:
            await hook(request)
        answer = await self.vendor.deliver(request, check)
        if answer.encoded:  # httpx undoes the encoding as the response is read
            response = answer.response()
            await response.aread()
            return Answered(response.status_code, response.headers, response.content)
        return Answered(answer.status, httpx.Headers(list(answer.headers)), answer.content)


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> httpx.URL:
    """A URL parsed once (httpx's parser is pure Python, some 20-30 us a URL): an agent reads the same
    issue, page or record again and again, a `reader` run three times. An httpx.URL cannot change."""
    return httpx.URL(url)


def answered(response: httpx.Response) -> Answered:
    """An httpx.Response (a client on another transport: a test's, httpx's own) as an adapter reads it."""
    return Answered(response.status_code, response.headers, response.content)
