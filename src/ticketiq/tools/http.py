"""The one way adapters talk to vendors: bounded in time, retried only where a retry cannot repeat a write.

- A 429 is retried for every kind of request: the vendor did not take it. Its `Retry-After` (or
  Discord's `retry_after`) is honoured; a wait longer than one request's bound is not slept out.
- A 5xx or a failure after the request may have reached the vendor is retried for reads and keyed
  writes only (the vendor dedupes on our key). A plain write is never resent: its outcome is
  `uncertain`, and the engine settles it (I9).
- A failure to connect is retried for every kind: nothing reached the vendor.
- Each try's last check (`last_check`: the lease, `ctx.before_send()`, and a write's window) runs as its
  first byte is written, in the call stack of the socket's send (tools/vendor_pool.py), so no request
  leaves after the lease deadline (I3) nor a write after its window (I14), even from a process that was
  frozen between its earlier checks and that write and let go on later.
- A write's tries fit its window (I14): none starts after the budget or the lease deadline it had at
  its mark, and each is cut off when the budget ends, so the mark bounds how long it can be in flight.
"""

from __future__ import annotations

import asyncio
import email.utils
import json as json_lib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import httpx

from ticketiq.errors import ToolError
from ticketiq.tools.base import CallContext, Outcome
from ticketiq.tools.vendor_client import Answered, VendorClient, answered
from ticketiq.tools.vendor_pool import BEFORE_WRITE
from ticketiq.values.json_depth import too_deep


class Send(StrEnum):
    READ = "read"
    KEYED = "keyed"  # a write the vendor dedupes on the key it carries
    UNKEYED = "unkeyed"  # a write that would apply twice if sent twice

    @property
    def resendable(self) -> bool:
        return self is not Send.UNKEYED


@dataclass(frozen=True)
class Reply:
    status: int
    body: Any  # parsed JSON; text when the vendor answered something else; None when empty
    headers: httpx.Headers


class VendorFailed(ToolError):
    """A request ended without a usable answer; `outcome` says what the model is told."""

    def __init__(self, outcome: Outcome, status: int | None = None) -> None:
        super().__init__(outcome.error or "vendor request failed")
        self.outcome = outcome
        self.status = status


async def request(
    ctx: CallContext,
    vendor: str,
    method: str,
    url: str,
    *,
    send: Send,
    headers: dict[str, str] | None = None,
    json: Any = None,
    params: Any = None,
) -> Reply:
    """Send one request (retrying as the module says) and return a 2xx reply, or raise VendorFailed."""
    limit = ctx.settings.vendor_max_retries
    retries = 0
    reached = False  # whether a try of this write may have reached the vendor
    while True:
        timeout = ctx.settings.http_timeout_s
        if ctx.window is not None:
            now = time.monotonic()
            if not ctx.window.may_send(now):
                spent = f"{vendor}: the write's budget was spent before it could be sent" + (
                    " again" if retries else ""
                )
                raise _failed(spent, uncertain=reached)
            timeout = ctx.window.try_timeout(now, timeout)
        ctx.before_send()
        sending = Sending()
        try:
            async with asyncio.timeout(timeout):  # the whole try, not only each phase of it
                if isinstance(ctx.http, VendorClient):  # the app's: its short way (tools/vendor_client.py)
                    answer = await ctx.http.exchange(method, url, headers=headers, json=json, params=params,
                                                     phase_s=timeout, check=last_check(ctx, sending))  # fmt: skip
                else:
                    answer = answered(await ctx.http.request(
                        method, url, headers=headers, json=json, params=params, timeout=timeout,
                        extensions=checked_at_write(last_check(ctx, sending)),
                    ))  # fmt: skip
        except WindowClosed as exc:
            # Its window closed while it waited for a connection or was frozen: nothing of this try left.
            raise _failed(f"{vendor}: the write's budget was spent before its bytes could leave",
                          uncertain=reached) from exc  # fmt: skip
        except (httpx.TransportError, TimeoutError) as exc:
            if _not_sent(exc, sending):
                # Nothing of this try left (no connection, or the try's bound ended while it waited for
                # one: every connection to this vendor busy): a failure to connect, retried for every kind.
                if retries < limit:
                    retries += 1
                    await asyncio.sleep(_backoff(retries))
                    continue
                why = f"no connection within {timeout:g} s" if isinstance(exc, TimeoutError) else type(exc).__name__
                raise _failed(f"{vendor} could not be reached ({why})", uncertain=reached) from exc
            reached = reached or send is not Send.READ
            if send.resendable and retries < limit:
                retries += 1
                await asyncio.sleep(_backoff(retries))
                continue
            raise _failed(f"{vendor} did not answer ({type(exc).__name__})", uncertain=reached) from exc
        reply = Reply(answer.status, _body(answer), answer.headers)
        if reply.status == 429:
            wait = _retry_after(reply)
            if retries < limit and wait <= ctx.settings.http_timeout_s:
                retries += 1
                await asyncio.sleep(wait)
                continue
            raise _failed(
                f"{vendor} is rate limiting (retry after {wait:g} s): {message_of(reply.body)}", 429, uncertain=reached
            )
        if reply.status >= 500:
            reached = reached or send is not Send.READ
            if send.resendable and retries < limit:
                retries += 1
                await asyncio.sleep(_backoff(retries))
                continue
            raise _failed(
                f"{vendor} failed ({reply.status}): {message_of(reply.body)}", reply.status, uncertain=reached
            )
        if reply.status >= 400:
            raise _failed(
                f"{vendor} refused the request ({reply.status}): {message_of(reply.body)}", reply.status,
                uncertain=reached,
            )  # fmt: skip
        return reply


def _not_sent(exc: BaseException, sending: Sending) -> bool:
    """Whether a failed try sent nothing: it never had a connection, or its bound ended before its bytes."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
        return True
    return isinstance(exc, TimeoutError) and not sending.started


class Sending:
    """Whether a try reached the moment its bytes go (a try cut off before it sent nothing)."""

    __slots__ = ("started",)

    def __init__(self) -> None:
        self.started = False


class WindowClosed(VendorFailed):
    """A write's window (I14) closed before a byte of its try was written: nothing of that try was sent."""

    def __init__(self, run_id: str) -> None:
        super().__init__(Outcome(ok=False, error=f"run {run_id}: the write's window closed before it was sent"))


def last_check(ctx: CallContext, sending: Sending | None = None) -> Callable[[], None]:
    """A request's last check, run by the transport as its first byte is written, with no await before the
    socket's send (tools/vendor_pool.py: BEFORE_WRITE): the lease (I3) and, for a write, its window (I14),
    which a read-back waits out on the database clock; a write let through here left before it closed."""

    def check() -> None:
        ctx.before_send()
        if ctx.window is not None and not ctx.window.may_send(time.monotonic()):
            raise WindowClosed(ctx.run_id)
        if sending is not None:
            sending.started = True

    return check


def checked_at_write(check: Callable[[], None]) -> dict[str, Any]:
    """A request's extensions that run `check` as its bytes are written, whatever transport the client has:
    the vendor transport's BEFORE_WRITE (in the same call as the socket's send), and httpcore's trace, which
    it awaits right before it writes the head and again the body (a client on httpx's own transport: the
    A2A SDK's, a test's)."""

    async def trace(event: str, info: dict[str, Any]) -> None:
        if event.endswith((".send_request_headers.started", ".send_request_body.started")):
            check()

    return {BEFORE_WRITE: check, "trace": trace}


def message_of(body: Any) -> str:
    """The vendor's own words from its error shape: incident.io, Jira, Graph, Discord, AWS or plain."""
    if isinstance(body, dict):
        found: list[str] = []
        if isinstance(body.get("errors"), list):  # incident.io
            for error in body["errors"]:
                if isinstance(error, dict) and error.get("message"):
                    field = (error.get("source") or {}).get("field")
                    found.append(f"{error['message']} (field {field})" if field else str(error["message"]))
        if isinstance(body.get("errorMessages"), list):  # Jira
            found += [str(m) for m in body["errorMessages"] if m]
            if isinstance(body.get("errors"), dict):
                found += [f"{k}: {v}" for k, v in body["errors"].items()]
        if isinstance(body.get("error"), dict) and body["error"].get("message"):  # Graph, Bot Framework
            found.append(str(body["error"]["message"]))
        if isinstance(body.get("error"), str):
            found.append(body["error"])
        if body.get("message") and not found:  # Discord, AWS
            details = _discord_fields(body.get("errors"))
            found.append(str(body["message"]) + (" - " + "; ".join(details) if details else ""))
        if found:
            return "; ".join(found)
    text = str(body or "no details").strip()
    return text[:300]


def _discord_fields(errors: Any, path: str = "") -> list[str]:
    """Discord nests field errors: {"nonce": {"_errors": [{"message": ...}]}}."""
    if not isinstance(errors, dict):
        return []
    out: list[str] = []
    for name, value in errors.items():
        if name == "_errors" and isinstance(value, list):
            out += [f"{path}: {e.get('message')}" for e in value if isinstance(e, dict)]
        else:
            out += _discord_fields(value, f"{path}.{name}" if path else str(name))
    return out


def _failed(error: str, status: int | None = None, *, uncertain: bool = False) -> VendorFailed:
    return VendorFailed(Outcome(ok=False, error=error, uncertain=uncertain), status)


def _body(answer: Answered) -> Any:
    if not answer.content:
        return None
    if too_deep(answer.content):
        return answer.text  # I16: kept as its text; parsed, it would fail whatever reads it
    try:
        return json_lib.loads(answer.content)  # as httpx's Response.json() parses it
    except ValueError:
        return answer.text


def _retry_after(reply: Reply) -> float:
    """Seconds to wait: Discord's precise `retry_after` first, then the header (seconds or a date)."""
    if isinstance(reply.body, dict) and isinstance(reply.body.get("retry_after"), int | float):
        return max(float(reply.body["retry_after"]), 0.0)
    raw = reply.headers.get("retry-after")
    if raw is None:
        return 1.0
    try:
        return max(float(raw), 0.0)
    except ValueError:
        pass
    try:
        return max(email.utils.parsedate_to_datetime(raw).timestamp() - time.time(), 0.0)
    except (ValueError, TypeError):
        return 1.0


def _backoff(attempt: int) -> float:
    # Jittered so that many calls failing together do not come back together.
    return min(0.2 * 2.0 ** (attempt - 1), 2.0) * (0.5 + random.random() / 2)
