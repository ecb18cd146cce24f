"""A process's engine: creates runs, takes them (acquire: lease + new attempt), drives each in a task."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any

from ticketiq.agents.catalog import Agent
from ticketiq.engine import seal
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.driver import RunDriver
from ticketiq.engine.state import RunState
from ticketiq.errors import TicketIQError

log = logging.getLogger(__name__)

TERMINAL = frozenset({"succeeded", "failed", "interrupted"})


@dataclass(frozen=True)
class Created:
    id: str
    status: str
    created: bool  # False: an earlier request with the same key made it
    request_hash: str | None = None


class Engine:
    def __init__(self, deps: EngineDeps) -> None:
        self.deps = deps
        self.tasks: dict[str, asyncio.Task[str]] = {}
        self.drivers: dict[str, RunDriver] = {}

    async def create_run(
        self,
        agent: Agent,
        text: str,
        *,
        may_wait: bool | None = None,
        channel: str = "api",
        idempotency_key: str | None = None,
        request_hash: str | None = None,
        parent_run_id: str | None = None,
        delegation_key: str | None = None,
        actor: str = "api",
    ) -> Created:
        """Insert the run with its first sealed checkpoint, in one statement. A repeated idempotency or
        delegation key returns the run the first request made."""
        run_id = str(uuid.uuid4())
        state = RunState(
            agent=agent.name,
            correlation_id=run_id,
            messages=[{"role": "system", "content": agent.system_prompt}, {"role": "user", "content": text}],
        )
        body = seal.canonical(state.to_json()).decode()
        mac, key_id = seal.seal(self.deps.keys, run_id, 0, body)
        row = await self.deps.db.fetch_one(
            "runs.create",
            {
                "id": run_id,
                "agent": agent.name,
                "input": text,
                "owner": agent.owner,
                "tenant": agent.tenant,
                "channel": channel,
                "may_wait": agent.may_wait if may_wait is None else may_wait,
                "correlation_id": run_id,
                "parent_run_id": parent_run_id,
                "delegation_key": delegation_key,
                "idempotency_key": idempotency_key,
                "request_hash": request_hash,
                "state": body,
                "seal": mac,
                "key_id": key_id,
                "actor": actor,
                "audit": {"agent": agent.name, "channel": channel, "parent_run_id": parent_run_id},
            },
        )
        if row is not None:
            return Created(id=str(row["id"]), status=str(row["status"]), created=True, request_hash=request_hash)
        if idempotency_key is not None:
            found = await self.deps.db.fetch_one("runs.by_idempotency_key", {"key": idempotency_key})
            if found is not None:
                return Created(str(found["id"]), str(found["status"]), False, found["request_hash"])
        if delegation_key is not None:
            found = await self.deps.db.fetch_one("runs.by_delegation_key", {"key": delegation_key})
            if found is not None:
                return Created(str(found["id"]), str(found["status"]), False)
        raise TicketIQError(f"run {run_id} was neither created nor found; retry the request")

    async def start(self, run_id: str) -> bool:
        """Take a queued or waiting run and drive it here. False when another process has it."""
        sent_at = time.monotonic()
        row = await self.deps.db.fetch_one(
            "runs.acquire",
            {
                "run_id": run_id,
                "holder": self.deps.holder,
                "ttl": self.deps.settings.lease_ttl_s,
            },
        )
        if row is None:
            return False
        lease = self.deps.keeper.hold(run_id, sent_at)
        self.launch(RunDriver(self.deps, run_id, int(row["attempt"]), lease, row))
        return True

    def launch_claimed(self, row: dict[str, Any], sent_at: float) -> None:
        """Execute a run this process just claimed from a lost one (I5, I6): under its new attempt."""
        run_id = str(row["run_id"])
        lease = self.deps.keeper.hold(run_id, sent_at)
        self.launch(RunDriver(self.deps, run_id, int(row["attempt"]), lease, row, claimed_at=sent_at))

    def launch(self, driver: RunDriver) -> None:
        self.drivers[driver.run_id] = driver
        self.tasks[driver.run_id] = asyncio.create_task(self._drive(driver), name=f"run-{driver.run_id}")

    async def _drive(self, driver: RunDriver) -> str:
        try:
            status = await driver.drive()
            log.info("run %s attempt %s: %s", driver.run_id, driver.attempt, status)
            return status
        except Exception:
            # A bug or a database outage: the run's lease is no longer renewed and lapses, so a sweep
            # can take it over; this process writes nothing more for it.
            log.exception("run %s attempt %s: driver failed", driver.run_id, driver.attempt)
            return "lost"
        finally:
            self.deps.keeper.drop(driver.run_id)
            self.tasks.pop(driver.run_id, None)
            self.drivers.pop(driver.run_id, None)

    async def wait_terminal(self, run_id: str, timeout_s: float, poll_s: float = 0.2) -> str:
        """Wait until the run ends wherever it runs (read only); return its status."""
        deadline = time.monotonic() + timeout_s
        while True:
            row = await self.deps.db.fetch_one("runs.status", {"run_id": run_id})
            status = str(row["status"]) if row else "missing"
            if status in TERMINAL or status == "missing" or time.monotonic() >= deadline:
                return status
            await asyncio.sleep(poll_s)

    async def shutdown(self, grace_s: float) -> None:
        """Let runs finish for a while, then stop driving them; their leases lapse and are swept."""
        if self.tasks:
            await asyncio.wait(list(self.tasks.values()), timeout=grace_s)
        for task in list(self.tasks.values()):
            task.cancel()
        for task in list(self.tasks.values()):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
