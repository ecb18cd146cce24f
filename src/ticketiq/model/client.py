"""The chat-completions client: one model step, spoken through the official `openai` package's client.

Any endpoint that speaks the OpenAI protocol works (OpenAI, Azure, vLLM, Ollama, LiteLLM, the stand-in).
The openai client holds the protocol's configuration: the base URL, the auth and default headers, the
timeout. The request of `chat.completions.create` is learnt from it once, through its public API only:
on the first step, a copy of it over an HTTP client whose transport keeps the request and answers an
empty completion makes one real `create` (`_learn`). Each step then sends that request with its body
written by `wire.py`, through the HTTP client the openai client was given, and reads the answer there
too. The package's request transform and reply models are left out: they cost a third of a step's CPU
and grew with the conversation (issue 19).

The openai client's own retries are off: this module retries 429, 408 and 5xx answers and
connection failures itself, so the bound (`model_max_retries`), the backoff and the honouring of
`Retry-After` are ours and tested. Which waits to make is decided by pure functions; `ModelClient` is
the thin driver around them.
"""

from __future__ import annotations

import asyncio
import math
import random
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, cast

import anyio
import httpx
import httpx2
import openai

from ticketiq.client.retries import retry_after_s as read_retry_after
from ticketiq.errors import ModelError
from ticketiq.model.wire import (
    ModelReply,
    ToolCallRequest,
    parse_arguments,
    refusal_detail,
    reply_from_body,
    reply_from_completion,
    request_body,
)
from ticketiq.runtime import stall
from ticketiq.runtime.user_agent import user_agent
from ticketiq.settings import Settings

__all__ = [
    "RETRY_AFTER_MAX_S",
    "ModelClient",
    "ModelReply",
    "ToolCallRequest",
    "backoff_s",
    "is_retryable_status",
    "parse_arguments",
    "parse_retry_after",
    "reply_from_body",
    "reply_from_completion",
]

# Backoff without Retry-After: 0.25 s, 0.5 s, 1 s ... at most 8 s, each scaled by a random 50-100%
# so that clients refused together do not all come back together.
_BACKOFF_BASE_S = 0.25
_BACKOFF_CAP_S = 8.0
# A server asking for a longer pause than this is not waited out inside one step: the step fails with
# the reason, rather than holding the run silently for minutes.
RETRY_AFTER_MAX_S = 60.0

# What either HTTP client raises when the endpoint did not answer in time, or could not be reached or
# read from; the openai package counts the same ones (TLS and stream ends included) as connection errors.
_TIMEOUTS = (httpx.TimeoutException, httpx2.TimeoutException)
_UNREACHABLE = (httpx.RequestError, httpx2.RequestError, ssl.SSLError, anyio.EndOfStream)
_RETRY_COUNT = "x-stainless-retry-count"
# Headers of the learnt request that belong to its HTTP client or to one body, not to the openai client.
_PER_REQUEST = ("host", "content-length")
# What the transport that keeps the learnt request answers: the least the openai client reads as a completion.
_NO_COMPLETION = {"id": "learnt", "object": "chat.completion", "created": 0, "model": "learnt", "choices": []}


def is_retryable_status(status: int) -> bool:
    """A 429, a 408 or a 5xx may succeed if asked again; any other refusal will not."""
    return status in (408, 429) or status >= 500


def parse_retry_after(headers: dict[str, str], now: datetime) -> float | None:
    """Seconds the server asked us to wait, from `retry-after-ms` (OpenAI's) or `Retry-After`
    (seconds or an HTTP date); None when it asked nothing readable."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            value = float(millis) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    # `Retry-After` (seconds or an HTTP date) is read as the Python client reads it: one reader of it.
    return read_retry_after(headers.get("retry-after"), now)


def backoff_s(retries_taken: int, retry_after_s: float | None, jitter: float) -> float | None:
    """How long to wait before retry number `retries_taken + 1`; None when the server asked for a
    longer pause than a step waits out. `jitter` is a number in [0, 1)."""
    if retry_after_s is not None:
        if retry_after_s > RETRY_AFTER_MAX_S:
            return None
        # Never earlier than asked; up to 10% later so a crowd told the same time spreads out.
        return retry_after_s * (1.0 + 0.1 * jitter)
    ceiling = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2.0**retries_taken)
    return ceiling * (0.5 + 0.5 * jitter)


class DirectAnswer(Protocol):
    """An answer as a DirectTransport reads it."""

    status: int
    content: bytes

    @property
    def encoded(self) -> bool: ...  # whether its body has a Content-Encoding to undo

    def response(self) -> httpx.Response: ...  # as httpx's transport answers it


class DirectTransport(Protocol):
    """A transport that also sends requests alike but for their body without httpx's Request and Response
    (tools/vendor_pool.py's VendorTransport: the model package does not import the tools)."""

    def prepare(self, method: str, url: httpx.URL, headers: Sequence[tuple[str, str]]) -> object: ...

    async def send(self, prepared: Any, body: bytes, timeouts: Mapping[str, float | None]) -> DirectAnswer: ...


class ModelClient:
    """One per process; `complete` is safe to call from many runs at once.

    Pass `http` to share a connection pool (an `httpx.AsyncClient` or the `httpx2.AsyncClient` the
    openai package uses itself); its owner closes it (this client, with `owns_http`). Without one, the
    client the openai package would make for itself (`openai.DefaultAsyncHttpxClient`) is made here and
    `close()` closes it. Either way each step goes through the client the openai client is given.

    Or pass `transport` (an app process's pool, tools/vendor_pool.py): the openai client is given an
    httpx client over it, this client owns both, and each step's request is handed to the transport
    straight. The client's send is passed by: its auth flow, cookies, redirects and event hooks, none of
    which the model endpoint is given (`stall.check` stands in for the hook), cost 0.06-0.12 ms of CPU
    a request.
    The headers are what that client would have sent, merged once (the same bytes, tested).
    On the app's VendorTransport (`DirectTransport`), the request is prepared once and a plain 2xx answer
    is read without an httpx.Response (a compressed one goes through it, to be decoded).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        http: httpx.AsyncClient | httpx2.AsyncClient | None = None,
        owns_http: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if transport is not None:
            if http is not None:
                raise ValueError("pass either http or transport, not both")
            http = httpx.AsyncClient(transport=transport, event_hooks={"request": [stall.before_request]})
            owns_http = True
        elif http is None:
            http = openai.DefaultAsyncHttpxClient(timeout=settings.model_timeout_s)
            owns_http = True
        self._settings = settings
        self._owns_http = owns_http
        self._legacy = isinstance(http, httpx.AsyncClient)
        # Typed as the openai package types its client; either library's serves (`_legacy` says which).
        self._http = cast(httpx2.AsyncClient, http)  # the request goes where the openai client sends
        self._transport = transport
        # The app's transport (tools/vendor_pool.py) also sends a prepared request's body straight.
        direct = all(callable(getattr(transport, name, None)) for name in ("prepare", "send"))
        self._direct = cast(DirectTransport, transport) if direct else None
        self._openai = openai.AsyncOpenAI(
            api_key=settings.model_api_key,
            base_url=settings.model_base_url,
            timeout=settings.model_timeout_s,
            max_retries=0,
            default_headers={"User-Agent": user_agent()},
            # The openai package accepts the legacy httpx client at run time; its annotation names
            # only httpx2.
            http_client=self._http,
        )
        self._template: _Template | None = None  # learnt on the first step
        self._learning = asyncio.Lock()  # the first steps of many runs at once learn it once

    async def _learn(self) -> _Template:
        """The request `chat.completions.create` sends, less its body: the URL from the base URL (and the
        default query), the headers (auth, the openai client's defaults, our User-Agent, the read timeout)
        and the timeout. None of them changes per step. The openai client makes it through a client of the
        same library as ours with no headers of its own, whose transport keeps it; nothing is sent."""
        async with self._learning:
            if self._template is None:
                self._template = await self._learnt()
            return self._template

    async def _learnt(self) -> _Template:
        kept: httpx.Request | httpx2.Request
        if self._legacy:
            legacy = _Kept()
            async with httpx.AsyncClient(transport=legacy) as sniffer:
                sniffer.headers.clear()
                await self._create_through(cast(httpx2.AsyncClient, sniffer))
            kept = legacy.requests[0]
        else:
            modern = _Kept2()
            async with httpx2.AsyncClient(transport=modern) as sniffer2:
                sniffer2.headers.clear()
                await self._create_through(sniffer2)
            kept = modern.requests[0]
        headers = [(k, v) for k, v in kept.headers.multi_items() if k not in _PER_REQUEST]
        url = str(kept.url)
        if self._transport is not None:
            # What the client's build_request adds to the openai client's headers (its own defaults, a
            # Host), once: the request then has the headers it always had. Content-Length goes per body.
            merged = cast(httpx.AsyncClient, self._http).build_request("POST", url, headers=headers)
            headers = [(k, v) for k, v in merged.headers.multi_items() if k != "content-length"]
        return _Template(url, httpx.URL(url), headers, {"timeout": kept.extensions["timeout"]})

    async def _create_through(self, sniffer: httpx2.AsyncClient) -> None:
        await self._openai.with_options(http_client=sniffer).chat.completions.create(model="learnt", messages=[])

    async def close(self) -> None:
        if self._owns_http:
            await self._openai.close()

    async def complete(self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        """Ask for one step. Raises ModelError when the endpoint refuses, or keeps failing after
        `model_max_retries` retries."""
        started = time.perf_counter()
        body = request_body(model, messages, tools)
        template = self._template or await self._learn()
        retries_taken = 0
        while True:
            cause: BaseException | None = None
            stall.check()  # a process stalled past its leases asks nothing more
            try:
                response = await self._send(template, body, _headers_for(template, retries_taken))
            except _TIMEOUTS as exc:
                retry_after = None
                reason = self._unreachable(model, "timed out", exc, retries_taken)
                cause = exc
            except _UNREACHABLE as exc:
                retry_after = None
                reason = self._unreachable(model, "could not be reached", exc, retries_taken)
                cause = exc
            else:
                status = response.status_code
                if 200 <= status < 300 or isinstance(response, _Plain):  # a plain answer is a 2xx
                    return reply_from_body(response.content, model, time.perf_counter() - started)
                # The reason goes through _scrub and no openai or httpx error is raised at all: the raw
                # body may echo the key.
                reason = self._refusal(model, status, response.content, retries_taken)
                if not is_retryable_status(status):
                    raise ModelError(reason)
                headers = {k.lower(): v for k, v in response.headers.items()}
                retry_after = parse_retry_after(headers, datetime.now(UTC))
            if retries_taken >= self._settings.model_max_retries:
                raise ModelError(reason) from cause
            wait = backoff_s(retries_taken, retry_after, random.random())
            if wait is None:
                raise ModelError(
                    f"{reason}; it asked to wait {retry_after:.0f} s, longer than the "
                    f"{RETRY_AFTER_MAX_S:.0f} s a step waits"
                )
            await asyncio.sleep(wait)
            retries_taken += 1

    async def _send(
        self, template: _Template, body: bytes, headers: list[tuple[str, str]]
    ) -> httpx.Response | httpx2.Response | _Plain:
        if self._transport is None:
            request = self._http.build_request("POST", template.url, headers=headers, content=body,
                                               extensions=template.extensions)  # fmt: skip
            return await self._http.send(request)
        if self._direct is not None:
            # An app process's pool: the request prepared once (its headers as httpx would send them), and
            # a plain 2xx answer read without an httpx.Response (tools/vendor_pool.py says what it saves).
            prepared = template.prepared if headers is template.headers else None
            if prepared is None:
                prepared = self._direct.prepare("POST", template.direct_url, headers)
                if headers is template.headers:
                    template.prepared = prepared
            answer = await self._direct.send(prepared, body, template.extensions["timeout"])
            if 200 <= answer.status < 300 and not answer.encoded:
                return _Plain(answer.status, answer.content)
            response = answer.response()
        else:
            direct = httpx.Request("POST", template.direct_url, headers=headers, content=body,
                                   extensions=template.extensions)  # fmt: skip
            response = await self._transport.handle_async_request(direct)
        try:
            await response.aread()  # decoded as the client's send would (Content-Encoding)
        finally:
            await response.aclose()
        return response

    def _refusal(self, model: str, status: int, body: bytes, retries_taken: int) -> str:
        detail = refusal_detail(status, body)
        return self._scrub(f"model endpoint answered {status} for model {model!r}{_after(retries_taken)}: {detail}")

    def _unreachable(self, model: str, what: str, exc: BaseException, retries_taken: int) -> str:
        return self._scrub(
            f"model endpoint {self._settings.model_base_url} {what} for model {model!r}{_after(retries_taken)}"
            f" ({type(exc).__name__}: {exc})"
        )

    def _scrub(self, text: str) -> str:
        # Servers echo a rejected key back ("Incorrect API key provided: sk-..."); it never goes on.
        for secret in self._settings.secrets():
            text = text.replace(secret, "***")
        return text


def _after(retries_taken: int) -> str:
    return f" after {retries_taken + 1} attempts" if retries_taken else ""


def _headers_for(template: _Template, retries_taken: int) -> list[tuple[str, str]]:
    if not retries_taken:
        return template.headers
    # The count the openai client sends when it retries itself.
    return [(k, str(retries_taken) if k == _RETRY_COUNT else v) for k, v in template.headers]


@dataclass
class _Template:
    """The request of one step, less its body, as the openai client makes it."""

    url: str
    direct_url: httpx.URL  # the same, for a request handed to the transport straight
    headers: list[tuple[str, str]]
    extensions: dict[str, Any]
    prepared: object = None  # a first try's request, prepared by a DirectTransport once


@dataclass(frozen=True, slots=True)
class _Plain:
    """A 2xx answer with a plain body, as `complete` reads it: nothing more is asked of it."""

    status_code: int
    content: bytes


class _Kept(httpx.AsyncBaseTransport):
    """Keeps each request it is given and answers it with an empty completion; sends nothing."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json=_NO_COMPLETION)


class _Kept2(httpx2.AsyncBaseTransport):
    """The same, for an httpx2 client."""

    def __init__(self) -> None:
        self.requests: list[httpx2.Request] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(request)
        return httpx2.Response(200, json=_NO_COMPLETION)
