"""What the client raises: the API's refusals, each with the field it names and its message, by status, and
an API that could not be reached. All are `ticketiq.errors.TicketIQError`s.

The API refuses with `{"detail": [{"loc": ["body", "agent"], "msg": "..."}]}` (a field: `field` is
`body.agent`) or `{"detail": "..."}` (no field: `field` is None); anything else is kept as its text.
"""

from __future__ import annotations

import json
from typing import Any

from ticketiq.errors import TicketIQError


class ClientError(TicketIQError):
    """Base of what `ticketiq.client` raises."""


class Unreachable(ClientError):
    """No answer: the connection was refused, timed out or broke, on every try."""

    def __init__(self, url: str, cause: Exception) -> None:
        super().__init__(f"cannot reach the API at {url} ({type(cause).__name__}: {cause or 'no answer'})")
        self.url = url
        self.cause = cause


class ApiError(ClientError):
    """The API answered with a refusal: `status`, the `field` it names (`body.agent`, `query.wait`,
    `path.run_id`, `header.Idempotency-Key`; None when it names none) and its `message`. `retry_after_s`:
    the pause it asked for, when it asked one."""

    def __init__(self, status: int, field: str | None, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.status = status
        self.field = field
        self.message = message
        self.retry_after_s = retry_after_s

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.status}, {self.field!r}, {self.message!r})"


class Invalid(ApiError):
    """400, 415, 422: the request is wrong where `field` says; sent again unchanged it fails again."""


class Unauthorized(ApiError):
    """401: no token, or one the API does not know (revoked, expired)."""


class Forbidden(ApiError):
    """403: the token may not do this."""


class NotFound(ApiError):
    """404: no such run, approval, job or question (or not one this token may read)."""


class Conflict(ApiError):
    """409: refused as things stand now (an approval decided already, a run not waiting for input)."""


class TooMany(ApiError):
    """429: too many requests, streams or waits; retried while the policy allows, then raised."""


class ServerError(ApiError):
    """5xx: the server failed (503: the database is away; retried while the policy allows, then raised)."""


_BY_STATUS: dict[int, type[ApiError]] = {400: Invalid, 401: Unauthorized, 403: Forbidden, 404: NotFound,
                                         409: Conflict, 415: Invalid, 422: Invalid, 429: TooMany}  # fmt: skip


def field_and_message(body: bytes, reason: str) -> tuple[str | None, str]:
    """The field and message of a refusal's body (its first field when it names several)."""
    text = body.decode(errors="replace")
    try:
        found = json.loads(text)["detail"]
    except (ValueError, KeyError, TypeError):
        return None, text[:300] or reason
    if isinstance(found, list) and found and isinstance(found[0], dict):
        first: dict[str, Any] = found[0]
        field = ".".join(str(part) for part in first.get("loc", ()))
        return field or None, str(first.get("msg", found))
    return None, str(found)


def refusal(status: int, body: bytes, reason: str, retry_after_s: float | None = None) -> ApiError:
    """The error of an answer that is no success."""
    field, message = field_and_message(body, reason)
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    return kind(status, field, message, retry_after_s)
