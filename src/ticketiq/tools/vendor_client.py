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

A request with no body and no params (an adapter's read: `jira_get_issue`, a run's most frequent vendor
request) is not an httpx.Request at all: its headers are what `build_request` and the transport would have
sent, worked out with httpx's own Headers once for each set of the client's and the adapter's headers
(`_Head`), with the Host (and a POST's `Content-Length: 0`) put first per request as httpx puts them.
`build_request` cost some 4% of a `reader` run's CPU in the served process (a sampling profile under
bench/client.py's load). That way is taken only when nothing could tell the difference: no JSON body
(its bytes are httpx's encoder's, which changed between httpx releases), no params, no base URL to merge,
no cookie in the client's jar, no header asking for a chunked body, and no request hook but the client's
own `before_send` (a hook is handed the httpx.Request; the stall check needs none).

What `exchange` leaves out of `client.request`, on purpose: cookies a vendor sets are not kept (one client
serves every run of every tenant; none of our vendors authenticates by cookie, and a cookie of one
tenant's answer sent with another's request would be a leak), redirects are not followed (the client
does not follow them either: httpx's default), and a closed client's request fails as the closed
transport's httpx.ConnectError (nothing sent) rather than httpx's RuntimeError.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from ticketiq.tools.vendor_pool import Answer, LastCheck, Target, VendorTransport, target

HEADS_KEPT = 256  # sets of headers whose merge is kept (an adapter's auth a tenant, times its accept)
_CONTENT_SENT = ("POST", "PUT", "PATCH")  # httpx gives these `Content-Length: 0` when they carry no body


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


@dataclass(frozen=True, slots=True)
class _Head:
    """The client's headers merged with a request's, as a bodiless httpx.Request of them goes out, but for
    what httpx puts before them per request (the Host, a POST's Content-Length)."""

    pairs: tuple[tuple[str, str], ...]
    has_host: bool
    has_length: bool
    chunked: bool  # a Transfer-Encoding header: httpx's own way handles it
    traced: bool


class VendorClient(httpx.AsyncClient):
    """httpx's client on one VendorTransport: every httpx use keeps working (the A2A SDK's, the app-token
    grant's), and the adapters' requests take `exchange` (the module's docstring). `before_send` runs
    before every request, as a request hook for httpx's own way and called as it is for the short way."""

    def __init__(
        self, transport: VendorTransport, *, before_send: Callable[[], None] | None = None, **options: Any
    ) -> None:
        hooks = dict(options.pop("event_hooks", None) or {})
        self._own_hooks: list[Callable[[httpx.Request], Awaitable[None]]] = []
        if before_send is not None:

            async def checked(request: httpx.Request) -> None:
                before_send()

            self._own_hooks.append(checked)
        hooks["request"] = [*self._own_hooks, *hooks.get("request", [])]
        super().__init__(transport=transport, event_hooks=hooks, **options)
        self.vendor = transport
        self._before_send = before_send
        self._heads: dict[tuple[Any, ...], _Head] = {}

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
        parsed, to = _parsed(url)
        short = json is None and params is None and to is not None  # `to`: an absolute http(s) URL
        head = self._bodiless_head(headers) if short else None
        if head is not None and to is not None:
            if self._before_send is not None:
                self._before_send()
            method = method.upper()
            sent = [] if head.has_host else [("Host", parsed.netloc.decode("latin-1"))]
            if not head.has_length and method in _CONTENT_SENT:
                sent.append(("Content-Length", "0"))
            sent.extend(head.pairs)
            timeouts = {"connect": phase_s, "read": phase_s, "write": phase_s, "pool": phase_s}
            answer = await self.vendor.send_bodiless(method, to, sent, head.traced, timeouts, check)
        else:
            request = self.build_request(method, parsed, headers=headers, json=json, params=params, timeout=phase_s)
            for hook in self.event_hooks["request"]:
                await hook(request)
            answer = await self.vendor.deliver(request, check)
        return await _read(answer)

    def _bodiless_head(self, headers: dict[str, str] | None) -> _Head | None:
        """The merged headers of a request with no body, when the short way may take it (else None)."""
        if self.cookies or self.params or self.event_hooks["request"] != self._own_hooks:
            return None
        key = (tuple(self.headers.raw), tuple(headers.items()) if headers else ())
        head = self._heads.get(key)
        if head is None:
            merged = httpx.Headers(self.headers)  # as build_request merges them
            merged.update(headers)
            head = _Head(tuple((name.decode("latin-1"), value.decode("latin-1")) for name, value in merged.raw),
                         "host" in merged, "content-length" in merged, "transfer-encoding" in merged,
                         "traceparent" in merged)  # fmt: skip
            if len(self._heads) >= HEADS_KEPT:
                self._heads.clear()
            self._heads[key] = head
        return None if head.chunked else head


async def _read(answer: Answer) -> Answered:
    if answer.encoded:  # httpx undoes the encoding as the response is read
        response = answer.response()
        await response.aread()
        return Answered(response.status_code, response.headers, response.content)
    return Answered(answer.status, httpx.Headers(list(answer.headers)), answer.content)


@functools.lru_cache(maxsize=1024)
def _parsed(url: str) -> tuple[httpx.URL, Target | None]:
    """A URL parsed once (httpx's parser is pure Python, some 20-30 us a URL), with where it goes (None:
    not http or https, refused as httpx's transport refuses it): an agent reads the same issue, page or
    record again and again, a `reader` run three times. An httpx.URL cannot change."""
    parsed = httpx.URL(url)
    try:
        return parsed, None if parsed.is_relative_url else target(parsed)
    except httpx.UnsupportedProtocol:
        return parsed, None


def answered(response: httpx.Response) -> Answered:
    """An httpx.Response (a client on another transport: a test's, httpx's own) as an adapter reads it."""
    return Answered(response.status_code, response.headers, response.content)
