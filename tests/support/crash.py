"""Crashes made precise, inside the test's event loop: a call held at the vendor while its process
"dies" (its driver task is cancelled and its lease left to a dead holder, lapsed), as a SIGKILL leaves
it, so a test can take the run over at exactly that point."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.support.engine import Probe, read_rows
from ticketiq.engine.engine import Engine


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 30.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"{what} never happened within {timeout_s} s"
        # A check most often reads on a connection of its own (read_rows): a server backend started per
        # look, which at 20 ms was a third of a core per waiting test, taken from the tests beside it.
        await asyncio.sleep(0.05)


async def status_of(db_url: str, run_id: str) -> str:
    return str((await read_rows(db_url, "SELECT status FROM runs WHERE id = %s", run_id))[0]["status"])


async def reaches(db_url: str, run_id: str, *statuses: str, timeout_s: float = 30.0) -> str:
    """Wait until the run is in one of `statuses` (as any process would see it); return its status."""

    async def check() -> bool:
        return await status_of(db_url, run_id) in statuses

    await eventually(check, timeout_s, f"run {run_id} reaching {statuses}")
    return await status_of(db_url, run_id)


async def run_row(db_url: str, run_id: str) -> dict[str, Any]:
    """The run's status, attempt and losses, as any process would read them now."""
    rows = await read_rows(
        db_url,
        "SELECT r.status, c.attempt, c.losses FROM runs r JOIN checkpoints c ON c.run_id = r.id WHERE r.id = %s",
        run_id,
    )
    return rows[0]


async def lapse(db_url: str, run_id: str) -> None:
    """The run's lease as a dead process leaves it: held by no live process, lapsed."""
    await read_rows(
        db_url, "UPDATE leases SET holder = 'dead', expires_at = now() - interval '1 s' WHERE name = %s",
        f"checkpoint:{run_id}",
    )  # fmt: skip


async def kill_driver(engine: Engine, run_id: str) -> None:
    """The process driving the run is gone: its driver stops where it is, mid-call if it was."""
    task = engine.tasks[run_id]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@dataclass
class HeldCall:
    """A probe that holds the first request of one kind at the vendor until released."""

    kind: str
    probe: Probe = field(default_factory=Probe)
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        async def hold(record: dict[str, Any]) -> None:
            if record["kind"] == self.kind and not self.reached.is_set():
                self.reached.set()
                await self.released.wait()

        self.probe.on_receive = hold

    async def at_vendor(self, timeout_s: float = 30.0) -> None:
        await asyncio.wait_for(self.reached.wait(), timeout_s)
