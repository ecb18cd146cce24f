"""`ticketiq.client`: a Python client of TicketIQ's HTTP API, `Client` (blocking) and `AsyncClient` (asyncio),
on httpx. One pure core decides (`exchange.py`, `operations.py`, `retries.py`, `events.py`); the two shells
(`sync.py`, `aio.py`) only send and sleep. Its typed results (`models.py`) are written from the API's OpenAPI
document (`make client-models`); its errors carry the API's field and message (`errors.py`). docs/client.md.

May import only the base module `errors` and libraries (httpx, httpx-sse): it runs in a user's program,
without the server. The CLI (`cli/`) is built on it.
"""

from __future__ import annotations

from ticketiq.client.aio import AsyncClient, AsyncEventStream
from ticketiq.client.errors import (
    ApiError,
    ClientError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    ServerError,
    TooMany,
    Unauthorized,
    Unreachable,
)
from ticketiq.client.events import RunEvent
from ticketiq.client.exchange import BadAnswer
from ticketiq.client.retries import RetryPolicy
from ticketiq.client.sync import Client, EventStream

__all__ = [
    "ApiError",
    "AsyncClient",
    "AsyncEventStream",
    "BadAnswer",
    "Client",
    "ClientError",
    "Conflict",
    "EventStream",
    "Forbidden",
    "Invalid",
    "NotFound",
    "RetryPolicy",
    "RunEvent",
    "ServerError",
    "TooMany",
    "Unauthorized",
    "Unreachable",
]
