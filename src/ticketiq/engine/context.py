"""What a run driver needs from its process, in one place."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from ticketiq.agents.catalog import Catalog
from ticketiq.engine.gate_watch import GateWatch
from ticketiq.engine.leases import LeaseKeeper
from ticketiq.engine.seal import SealKeys
from ticketiq.metrics import Metrics
from ticketiq.model.client import ModelReply
from ticketiq.runtime.faults import Faults
from ticketiq.settings import Settings
from ticketiq.storage.database import Database
from ticketiq.storage.gate_store import GateStore
from ticketiq.storage.run_store import RunStore
from ticketiq.tools.base import Registry


class Model(Protocol):
    async def complete(
        self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply: ...


@dataclass
class EngineDeps:
    db: Database
    settings: Settings
    registry: Registry
    catalog: Catalog
    model: Model
    keys: SealKeys
    keeper: LeaseKeeper
    holder: str  # this process start's identity (I4: fresh per start)
    http: httpx.AsyncClient
    faults: Faults
    gate_watch: GateWatch
    metrics: Metrics
    store: RunStore
    gates: GateStore
    # I12: what an entry point does to hand a run's kept answer on, by channel, besides the statement
    # that ends the run (a Teams reply, a cron outcome). Called with the driver and the answer; returns
    # what the hand-on audit records. A2A tasks and co-pilot callers follow the run's status instead.
    hand_ons: dict[str, Callable[[Any, str], Awaitable[dict[str, Any]]]] = field(default_factory=dict)
    # Set when the process stops cleanly (a roll, SIGTERM): each driver stops at its next step boundary,
    # before its next model call, and its run is handed over to another process (Engine.shutdown).
    handing_over: asyncio.Event = field(default_factory=asyncio.Event)
