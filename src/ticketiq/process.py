"""One app process assembled: database, migrations, gates seeded, lease renewer, engine, model, tools."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from ticketiq.agents import catalog as agents
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.delegation import delegation_tool
from ticketiq.engine.engine import Engine
from ticketiq.engine.faults import Faults
from ticketiq.engine.gate_watch import GateWatch
from ticketiq.engine.leases import LeaseKeeper
from ticketiq.engine.seal import load_keys
from ticketiq.errors import StorageError
from ticketiq.leader.election import Elector
from ticketiq.leader.liveness import Liveness
from ticketiq.metrics import Metrics
from ticketiq.model.client import ModelClient
from ticketiq.settings import Settings
from ticketiq.storage import database
from ticketiq.storage.database import Database
from ticketiq.storage.migrate import migrate
from ticketiq.tools.base import Tool
from ticketiq.tools.registry import build_registry

log = logging.getLogger(__name__)


def new_identity() -> str:
    """I4: each process start has a fresh identity; a restarted process holds nothing of its past."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


@dataclass
class AppProcess:
    settings: Settings
    target: database.Target
    db: Database
    engine: Engine
    keeper: LeaseKeeper
    model: ModelClient
    http: httpx.AsyncClient
    liveness: Liveness
    elector: Elector

    @classmethod
    async def start(cls, settings: Settings, extra_tools: Sequence[Tool] = ()) -> AppProcess:
        target = database.resolve(settings)
        try:
            conn = await database.connect(target.url)
            try:
                await migrate(conn)
            finally:
                await conn.close()
            db = Database(target.url, min_size=settings.db_pool_min, max_size=settings.db_pool_max)
            await db.open()
        except Exception:
            target.release()
            raise
        registry = build_registry(settings)
        for tool in extra_tools:
            registry.register(tool)
        holder = new_identity()
        keeper = LeaseKeeper(target.url, holder, settings.lease_ttl_s, settings.lease_renew_s,
                             settings.lease_margin_s)  # fmt: skip
        model = ModelClient(settings)
        http = httpx.AsyncClient(timeout=settings.http_timeout_s)
        deps = EngineDeps(
            db=db, settings=settings, registry=registry, catalog=agents.Catalog(agents={}), model=model,
            keys=load_keys(settings), keeper=keeper, holder=holder, http=http,
            faults=Faults(settings.fault_point, settings.fault_after), gate_watch=GateWatch(target.url),
            metrics=Metrics(),
        )  # fmt: skip
        engine = Engine(deps)
        registry.register(delegation_tool(engine))
        deps.catalog = agents.load(settings.agents, known_tools=set(registry.tools))
        await seed_gates(db, deps.catalog)
        liveness = Liveness(target.url, settings.liveness_poll_s, on_lost=lambda why: None)
        await liveness.register(holder)
        process = cls(settings, target, db, engine, keeper, model, http, liveness, Elector(engine, target.url))
        liveness.on_lost = process._liveness_lost
        liveness.start()
        keeper.start()
        deps.gate_watch.start()
        if settings.lead:
            process.elector.start()
        log.info("process %s ready", holder)
        return process

    def _liveness_lost(self, why: str) -> None:
        """Our mark may be free: another process may take our runs at any moment. Send nothing more
        under this identity, and come back as a new one (I4: a fresh identity holds nothing)."""
        self.keeper.lose_all(why)
        self._reincarnation = asyncio.create_task(self._reincarnate(), name="reincarnate")

    async def _reincarnate(self) -> None:
        while True:
            holder = new_identity()
            try:
                await self.liveness.register(holder)
            except Exception as exc:
                log.error("cannot take a liveness mark yet (%s); trying again", exc)
                await asyncio.sleep(1.0)
                continue
            self.keeper.holder = holder
            self.engine.deps.holder = holder
            self.liveness.start()
            log.warning("process continues as %s", holder)
            return

    async def stop(self) -> None:
        """Stop cleanly: step down, let runs finish for the grace period, hand the rest back (they go
        on elsewhere without counting a loss), say we ended, free the liveness mark."""
        await self.elector.stop()
        await self.engine.shutdown(self.settings.shutdown_grace_s)
        await self.keeper.stop()
        try:
            handed = await self.db.fetch_all("leader.hand_back", {"holder": self.engine.deps.holder})
            if handed:
                log.info("handed back %d runs", len(handed))
        except StorageError as exc:
            log.error("could not hand runs back (%s); their leases will lapse and be swept", exc)
        await self.liveness.stop(self.db)
        await self.engine.deps.gate_watch.stop()
        await self.model.close()
        await self.http.aclose()
        await self.db.close()
        self.target.release()


async def seed_gates(db: Database, catalog: agents.Catalog) -> None:
    """Owners get grants for their agents' tools, and tools named in the file need approval, unless a
    person already decided otherwise (seeding only inserts what is missing)."""
    async with db.transaction() as tx:
        for agent in catalog.agents.values():
            await tx.execute("gates.seed_principal", {"name": agent.owner})
            for tool in agent.tools:
                await tx.execute("gates.seed_grant", {"principal": agent.owner, "tool": tool})
        for tool in sorted(catalog.approval_required):
            await tx.execute("gates.seed_policy", {"tool": tool, "needs_approval": True})
