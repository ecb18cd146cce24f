"""What both shells tell httpx: the headers of every request, the timeouts, the paths of the events, and
which of httpx's errors mean the request never left."""

from __future__ import annotations

from urllib.parse import quote

import httpx

from ticketiq.client.events import EVENTS_READ_S
from ticketiq.client.exchange import Request

# No connection was made (or none was free): the server saw nothing, so any request may be sent again.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


def client_headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def request_timeout(timeout_s: float, request: Request) -> httpx.Timeout:
    """The client's timeout, its read stretched for a wait (the answer comes when the wait ends)."""
    read = max(timeout_s, request.read_s or 0.0)
    return httpx.Timeout(timeout_s, read=read)


def stream_timeout(timeout_s: float) -> httpx.Timeout:
    """An events stream is quiet between changes, pinged every 15 s: a read waits EVENTS_READ_S at most."""
    return httpx.Timeout(min(timeout_s, 10.0), read=EVENTS_READ_S)


def events_path(run_id: str) -> str:
    return f"/v1/runs/{quote(str(run_id), safe='')}/events"
