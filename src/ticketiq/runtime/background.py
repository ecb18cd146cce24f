"""A loop a process keeps running beside its requests (renewer, listeners, elector, liveness)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any


class Background:
    def __init__(self, name: str, loop: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self.loop = loop
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.loop(), name=self.name)

    async def stop(self) -> None:
        """Cancel the loop and wait until it has stopped."""
        if self.task is not None:
            await cancelled(self.task)
            self.task = None


# How often a task that has not ended is cancelled again (`cancelled`).
AGAIN_S = 1.0


async def cancelled(task: asyncio.Future[Any], again_s: float = AGAIN_S) -> None:
    """Cancel `task` and wait until it has ended; its own CancelledError is not raised here, any other
    error it ended with is.

    Why not `with contextlib.suppress(CancelledError): await task`: that suppresses the cancel of the
    caller too, should it come while it waits (a stop cancelling the caller then waits on a loop that went
    on). And a task that swallowed its cancel (a library's wait, or a loop of ours catching it at the
    wrong moment) is cancelled again every `again_s` rather than waited for forever: seen in a process
    whose elector went back to its loop while the process stopped, which then never exited."""
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=again_s)
    if not task.cancelled():
        task.result()  # a task that failed on its own raises its error here, as awaiting it did
