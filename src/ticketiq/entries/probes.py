"""`/healthz` and `/readyz`, answered before the rest of the stack sees the request.

An edge or an orchestrator asks them every second or two, and a crowd of them may ask at once: they pay
for nothing they do not use. `Probes` answers them as a pure ASGI middleware, the outermost of the app's
own, in bytes made once: no route is matched, no dependency solved, no body or token read (both paths
are open, `entries/auth.py`). The routes of the same names stay in the API (its description, and an app
served without this middleware) and answer through the same `Readiness`.

Ready means the database answered a statement of this process's pool lately: a ping that answered within
`FRESH_S` is the answer to every probe until then, and probes that come while a ping is out wait for that
one ping (one statement a `FRESH_S` at most, however many ask). A ping still answers within
`READY_WITHIN_S`, or the probe is 503; while the database is known to be gone (a failover under way) no
earlier answer is trusted and the bound is halved, so the edge takes the process out at once and puts it
back at the first answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.entries.text_guard import has_body
from ticketiq.errors import StorageError
from ticketiq.runtime import release

READY_WITHIN_S = 1.0
# How long a ping's answer stands for the database's: far below the edge's check interval (2 s,
# operate/edge.py) and the time a failover takes, so no probe is told less than an edge would see.
FRESH_S = 0.25
PROBE_PATHS = ("/healthz", "/readyz")

_HEALTHY = orjson.dumps({"ok": True})
_JSON = [(b"content-type", b"application/json")]


def ping_is_fresh(answered_at: float | None, now: float, database_down: bool) -> bool:
    """Whether the last ping's answer still stands for the database's: recent, and nothing heard since that
    says the database went."""
    return answered_at is not None and not database_down and now - answered_at < FRESH_S


class Readiness:
    """Whether this process can reach its database now, one ping shared by every probe asking at once."""

    def __init__(self, ping: Callable[[], Awaitable[None]], database_down: Callable[[], bool], process: str) -> None:
        self._ping = ping
        self._down = database_down
        self._answered_at: float | None = None
        self._pinging: asyncio.Task[None] | None = None
        self._ready = orjson.dumps({"ready": True, "process": process, **release.current().view()})

    async def check(self) -> tuple[int, bytes]:
        """(200, the ready body) or (503, why not), within `READY_WITHIN_S` (half while the database is down)."""
        down = self._down()
        if ping_is_fresh(self._answered_at, time.monotonic(), down):
            return 200, self._ready
        if self._pinging is None:
            self._pinging = asyncio.get_running_loop().create_task(self._pinged(), name="readiness-ping")
            # Its failure is each waiting probe's answer; with none left waiting, it is read here, not lost.
            self._pinging.add_done_callback(_seen)
        try:
            async with asyncio.timeout(READY_WITHIN_S / 2 if down else READY_WITHIN_S):
                # Shielded: a probe that gives up does not take the ping from the others waiting on it.
                await asyncio.shield(self._pinging)
        except (StorageError, TimeoutError) as exc:
            reason = str(exc) or "the database did not answer within a second"
            return 503, orjson.dumps({"ready": False, "reason": reason})
        return 200, self._ready

    async def _pinged(self) -> None:
        try:
            await self._ping()
            self._answered_at = time.monotonic()
        finally:
            self._pinging = None


class Probes:
    """Pure ASGI middleware: GET `/healthz` and `/readyz` answered here; everything else passes on."""

    def __init__(self, app: ASGIApp, readiness: Callable[[Scope], Readiness]) -> None:
        self.app = app
        self.readiness = readiness

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # One sent with a body goes the whole way: the body is checked (text_guard) on every route.
        asked = scope["type"] == "http" and scope["method"] == "GET" and not has_body(scope["headers"])
        path = _route_path(scope) if asked else None
        if path == "/healthz":
            await _answer(send, 200, _HEALTHY)
        elif path == "/readyz":
            await _answer(send, *await self.readiness(scope).check())
        else:
            await self.app(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The path the router matches: behind a proxy's root path, `path` still carries it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _seen(task: asyncio.Task[None]) -> None:
    if not task.cancelled():
        task.exception()


async def _answer(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [*_JSON, (b"content-length", str(len(body)).encode())]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
