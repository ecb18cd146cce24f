"""`GET /v1/runs/{id}?wait=S` (issue 35): the run's answer as soon as it ended, waits for a person (input or
an approval), or S seconds passed, in one request instead of a poll loop.

- The wait is woken by the run events the process already hears (`RunViews.shown_when`, the feed's
  listener): it reads the run as it is answered once when it begins and again at each change, never on a
  timer of its own (a wait that ends at its first wake-up makes two statements, as two polls would).
- Waiting requests are bounded by TICKETIQ_MAX_WAITERS on this process; one more is answered at once,
  with the run as it is and `Retry-After`. A wait also holds a follow (`views/follows.py`), so it ends
  when its credential ends, as an event stream does; the event streams' caps (per principal, per
  process) are not its: a client with 32 runs in flight under one token waits for all 32 at once.
- A client that hangs up frees its waiter: the request's `http.disconnect` (awaited, not polled) ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any

from starlette.requests import Request

from ticketiq.engine.engine import TERMINAL
from ticketiq.entries.auth import credential
from ticketiq.views.follows import Credential, CredentialEnded, Follow, Follows, TooMany
from ticketiq.views.runs import RunViews

WAIT_MAX_S = 60.0
KIND = "wait"


def done_waiting(status: str | None) -> bool:
    """Whether a wait ends on this status: the run ended, or it waits for a person (or is gone)."""
    return status is None or status in TERMINAL or status == "waiting"


class Waiters:
    """How many waits this process holds, against TICKETIQ_MAX_WAITERS."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0

    def take(self) -> bool:
        if self.held >= self.limit:
            return False
        self.held += 1
        return True

    def give_back(self) -> None:
        self.held -= 1


async def hung_up(request: Request) -> None:
    """Returns when the client hangs up (its `http.disconnect`); a GET's body is read past first."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class Outcome(Enum):
    REFUSED = "refused"  # too many waiting, or the credential ended: answered at once, with Retry-After
    HUNG_UP = "hung_up"  # the client left: nothing is answered to anyone


async def waited(
    request: Request,
    wait_s: float,
    shown_when: Callable[[float, Follow], Awaitable[dict[str, Any] | None]],
    follows: Follows,
    credential: Credential,
    waiters: Waiters,
) -> dict[str, Any] | Outcome | None:
    """Wait as the module says: the run as shown once the wait ended (None: no such run), or why not."""
    if not waiters.take():
        return Outcome.REFUSED
    try:
        try:
            follow = follows.open(credential, KIND, wait_s, capped=False)
        except (TooMany, CredentialEnded):
            return Outcome.REFUSED
        try:
            leaving = asyncio.ensure_future(hung_up(request))
            waiting = asyncio.ensure_future(shown_when(wait_s, follow))
            try:
                await asyncio.wait({leaving, waiting}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (leaving, waiting):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            if waiting.cancelled():
                return Outcome.HUNG_UP
            return waiting.result()  # raised as it was raised (a database error is the route's 503)
        finally:
            follows.close(follow)
    finally:
        waiters.give_back()


async def waited_run(
    request: Request, run_id: str, wait_s: float, scope: str | None
) -> tuple[dict[str, Any] | None, bool] | None:
    """The run as shown once the wait ended, and whether the wait was refused (too many waiting: the run as it
    is now, to be answered with Retry-After); None when the client hung up. `scope` as `RunViews.shown_run`."""
    process = request.app.state.process
    views: RunViews = process.views

    async def shown_when(left: float, follow: Follow) -> dict[str, Any] | None:
        return await views.shown_when(run_id, scope, left, done_waiting, follow)

    found = await waited(request, wait_s, shown_when, process.follows, credential(request), request.app.state.waiters)
    if found is Outcome.HUNG_UP:
        return None
    if found is Outcome.REFUSED:
        return await views.shown_run(run_id, scope), True
    return found, False
