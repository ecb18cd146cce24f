"""One app process assembled: database, migrations, gates seeded, lease renewer, engine, model, tools."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx

from ticketiq.agents import catalog as agents
from ticketiq.dbserver.target import Target, resolve
from ticketiq.dbserver.watch import ServerWatch
from ticketiq.engine import seal
from ticketiq.engine.context import EngineDeps
from ticketiq.engine.delegation import TOOL_NAME as DELEGATION_TOOL
from ticketiq.engine.delegation import delegation_tool
from ticketiq.engine.engine import Engine
from ticketiq.engine.gate_watch import GateWatch
from ticketiq.engine.leases import LeaseKeeper
from ticketiq.errors import ConfigError, StorageError
from ticketiq.intake import scheduler, teams_turns
from ticketiq.jobs.worker import JobWorker
from ticketiq.leader.election import Elector
from ticketiq.leader.handoffs import Handoffs
from ticketiq.leader.liveness import Liveness
from ticketiq.metrics import Metrics
from ticketiq.model.client import ModelClient
from ticketiq.runtime import logs, stall, tracing
from ticketiq.runtime.faults import Faults
from ticketiq.runtime.user_agent import user_agent
from ticketiq.settings import Settings
from ticketiq.storage.console_store import ConsoleStore
from ticketiq.storage.database import ConnectionLimits, Database
from ticketiq.storage.gate_store import GateStore
from ticketiq.storage.migrate import migrate_pooled
from ticketiq.storage.outage import backoff_s
from ticketiq.storage.process_store import ProcessStore
from ticketiq.storage.run_store import RunStore
from ticketiq.storage.seal_store import SealProbeStore
from ticketiq.storage.token_store import TokenStore
from ticketiq.tools.base import Registry, Tool
from ticketiq.tools.mcp_tools import McpServers
from ticketiq.tools.registry import build_registry
from ticketiq.tools.vendor_client import VendorClient
from ticketiq.tools.vendor_pool import VendorTransport
from ticketiq.views.follows import CredentialCheck, Follows
from ticketiq.views.run_events import RunEvents
from ticketiq.views.runs import RunViews

log = logging.getLogger(__name__)

# At a clean stop, how long the spans still queued may take to reach the collector.
TRACES_FLUSH_S = 2.0

# How long a process coming back under a new identity waits for its drivers to stop and its elector to
# step down before it lets the old identity's mark go: a driver that takes longer sends nothing anyway
# (its lease is lost), and the wait only spares a claim that would find the run still driven here.
STEP_DOWN_WAIT_S = 5.0


def new_identity() -> str:
    """I4: each process start has a fresh identity; a restarted process holds nothing of its past."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def check_agents(settings: Settings) -> None:
    """The agents file read as `AppProcess.start` reads it, before anything starts: a missing file, bad
    YAML or an unknown tool is a ConfigError the command prints as one line (exit 2)."""
    # A database never opened: the tools that read our tables are named here, not used.
    registry = build_registry(settings, Database(settings.database_url or ""))
    declared = agents.load(settings.agents, known_tools={*registry.tools, DELEGATION_TOOL})
    if declared.mcp_servers:
        # The tools the agents name on MCP servers, checked against what each lists as the app's start checks
        # them: here a mistake is one line and exit 2, under uvicorn's start-up a traceback and exit 3.
        unlisted = asyncio.run(_mcp_unlisted(declared, settings.mcp_start_wait_s))
        if unlisted:
            raise ConfigError(f"{settings.agents}: {'; '.join(unlisted)}; fix the agents file or the server")


async def _mcp_unlisted(declared: agents.Catalog, wait_s: float) -> list[str]:
    servers = McpServers(declared.mcp_servers)
    try:
        await servers.start(wait_s)
        servers.register(Registry(), declared.named_tools())
        return servers.unlisted()
    finally:
        await servers.stop()


@dataclass
class AppProcess:
    settings: Settings
    target: Target
    db: Database
    engine: Engine
    keeper: LeaseKeeper
    model: ModelClient
    http: httpx.AsyncClient
    liveness: Liveness
    elector: Elector
    handoffs: Handoffs
    views: RunViews
    follows: Follows  # the event streams and long waits held open here (views/follows.py)
    credential_check: CredentialCheck
    jobs: JobWorker = field(init=False)  # the job worker (issue 10)
    server_watch: ServerWatch | None = field(default=None, init=False)  # the home's embedded server, if ours
    mcp: McpServers | None = field(default=None, init=False)  # the agents file's MCP servers, reached from here
    _reincarnation: asyncio.Task[None] | None = field(default=None, init=False)
    _stopping: bool = field(default=False, init=False)

    @classmethod
    async def start(cls, settings: Settings, extra_tools: Sequence[Tool] = ()) -> AppProcess:
        target = resolve(settings)
        limits = ConnectionLimits.from_settings(settings)
        # On the embedded server of our home: started again by one of its users if it is killed.
        server_watch = ServerWatch(target.server) if target.server is not None else None
        if server_watch is not None:
            server_watch.start()
        try:
            keys = seal.load_keys(settings)
            db = Database(target.url, min_size=settings.db_pool_min, max_size=settings.db_pool_max, limits=limits)
            await db.open()
            try:
                await migrate_pooled(db)
                await check_key_probe(db, keys)
            except Exception:
                await db.close()
                raise
        except Exception:
            if server_watch is not None:
                await server_watch.stop()
            target.release()
            raise
        registry = build_registry(settings, db)
        for tool in extra_tools:
            registry.register(tool)
        declared = agents.load(settings.agents)  # checked against the tools below, once the servers answered
        mcp = McpServers(declared.mcp_servers)
        await mcp.start(settings.mcp_start_wait_s)
        mcp.register(registry, declared.named_tools())
        unlisted = mcp.unlisted()
        if unlisted:
            await mcp.stop()
            await db.close()
            if server_watch is not None:
                await server_watch.stop()
            target.release()
            raise ConfigError(f"{settings.agents}: {'; '.join(unlisted)}; fix the agents file or the server")
        holder = new_identity()
        tracing.start()  # only when OTEL_EXPORTER_OTLP_ENDPOINT says where (runtime/tracing.py)
        logs.name_process(holder)
        keeper = LeaseKeeper(target.url, holder, settings.lease_ttl_s, settings.lease_renew_s,
                             settings.lease_margin_s, limits)  # fmt: skip
        # Every outbound request names this process (vendors log it) and is refused once it stalled.
        # One pool per host, sized to the calls in flight (issue 19): it neither scans nor churns.
        faults = Faults(settings.fault_point, settings.fault_after)
        http = VendorClient(VendorTransport(settings.vendor_connections, faults=faults),
                            timeout=settings.http_timeout_s, headers={"User-Agent": user_agent()},
                            before_send=stall.check)  # fmt: skip
        # The model's steps on a pool of the same kind, sized apart: a thousand runs may wait on the model
        # at once. Each step's request is handed to it straight, with the openai client's headers and
        # timeout (model/client.py); ModelClient.close closes it.
        model = ModelClient(settings, transport=VendorTransport(settings.model_connections))
        deps = EngineDeps(
            db=db, settings=settings, registry=registry, catalog=agents.Catalog(agents={}), model=model,
            keys=keys, keeper=keeper, holder=holder, http=http,
            faults=faults, gate_watch=GateWatch(target.url, limits),
            metrics=Metrics(), store=RunStore(db), gates=GateStore(db),
        )  # fmt: skip
        engine = Engine(deps)
        deps.metrics.count_spans_dropped(tracing.dropped)
        registry.register(delegation_tool(engine))
        deps.catalog = agents.load(settings.agents, known_tools=set(registry.tools))
        await deps.gates.seed(deps.catalog.owner_tools(), deps.catalog.approval_required)
        await scheduler.install(engine)  # the cron hand-on, and the agents file's schedules seeded
        teams_turns.install(engine)  # the Teams reply: the teams channel's hand-on
        # Runs the leader gives this process: heard of on the liveness connection, looked for every
        # renewal interval anyway.
        handoffs = Handoffs(engine, settings.lease_renew_s)
        liveness = Liveness(target.url, settings.liveness_poll_s, on_lost=lambda why: None, limits=limits,
                            on_handed=handoffs.heard, outage=db.outage)  # fmt: skip
        await liveness.register(holder)
        events = RunEvents(deps.gate_watch)  # heard on the gate watch's connection
        # Capped, and each ended when its token is revoked or its console session ends, on any process.
        follows = Follows(settings.max_streams_per_principal, settings.max_streams)
        deps.gate_watch.on_token = follows.token_ended
        deps.gate_watch.on_session = follows.session_ended
        check = CredentialCheck(follows, TokenStore(db), ConsoleStore(db), deps.gate_watch)
        process = cls(settings, target, db, engine, keeper, model, http, liveness, Elector(engine, target.url),
                      handoffs, RunViews(engine, events), follows, check)  # fmt: skip
        process.server_watch = server_watch
        process.mcp = mcp
        processes = ProcessStore(db)
        mcp.on_change = lambda: processes.report_mcp(engine.deps.holder, mcp.views())
        if mcp.links:
            await processes.report_mcp(holder, mcp.views())
        liveness.on_lost = process._liveness_lost
        # Renewals that failed past a lease's deadline lose the identity's runs as surely (I14).
        keeper.on_lost = process._liveness_lost
        liveness.start()
        keeper.start()
        deps.gate_watch.start()
        check.start()
        handoffs.start()
        process.jobs = JobWorker(engine)
        engine.wake_jobs = process.jobs.wake
        process.jobs.start()
        if settings.lead:
            process.elector.start()
        log.info("process %s ready", holder)
        return process

    def _liveness_lost(self, why: str) -> None:
        """Our mark may be free, or our leases lapsing: another process may take our runs at any moment.
        Send nothing more under this identity (I14: every lease is lost at once, the elector steps
        down), admit no run until a new identity holds its own mark, and come back as it (I4: a fresh
        identity holds nothing)."""
        self.engine.admitted.clear()
        self.engine.marks_lost += 1
        self.keeper.lose_all(why)
        if self._stopping or (self._reincarnation is not None and not self._reincarnation.done()):
            return  # stopping anyway, or already coming back
        self._reincarnation = asyncio.create_task(self._reincarnate(why), name="reincarnate")

    async def _reincarnate(self, why: str) -> None:
        """Come back after the mark was lost: under the same identity when its mark can be re-taken (the
        database failed over or restarted: every process's lock went with it, and none of them died),
        else under a new one (I4). Either way the runs the old mark covered were lost here (I14) and are
        claimed again by the sweep, each once (I5)."""
        old = self.engine.deps.holder
        await self._step_down()
        # Taken meanwhile under the old identity (an election or a claim in flight): lost as well.
        self.keeper.lose_all(why)
        tries = 0
        while True:
            try:
                kept = await self.liveness.retake()
            except Exception as exc:
                # The database is not back yet (no primary takes writes): try again soon, then every
                # half second (outage.backoff_s).
                log.error("cannot take the liveness mark of %s again yet (%s); trying again", old, exc)
                await asyncio.sleep(backoff_s(tries))
                tries += 1
                continue
            if kept:
                await self._fresh_pool()
                self.db.outage.answered()
                self.liveness.start()
                self.engine.admitted.set()
                # Runs given to it and queued jobs are looked for now, not at the next poll.
                self.handoffs.heard()
                self.jobs.wake()
                log.warning("process %s holds its liveness mark again; its runs were given up to the sweep", old)
                return
            break
        # The identity cannot be kept: the leader finds it dead and claims its runs at once.
        await self.liveness.release()
        while True:
            holder = new_identity()
            try:
                await self.liveness.register(holder)
            except Exception as exc:
                log.error("cannot take a liveness mark yet (%s); trying again", exc)
                await asyncio.sleep(backoff_s(tries))
                tries += 1
                continue
            await self._fresh_pool()
            self.keeper.holder = holder
            self.engine.deps.holder = holder
            logs.name_process(holder)
            self.liveness.start()
            self.engine.admitted.set()
            log.warning("process %s continues as %s", old, holder)
            return

    async def _fresh_pool(self) -> None:
        """The mark is back: every pooled connection is replaced. One made before the mark went may lead
        to a server that froze and was then demoted (a stall of the old primary): woken, it would hold a
        statement until its demotion. The new ones go first to the server the mark was taken on (hosts.py);
        one in use now is closed when it comes back."""
        try:
            await self.db.pool.drain()
        except Exception as exc:
            log.error("could not replace the pool's connections (%s); they are replaced as they fail", exc)

    async def _step_down(self) -> None:
        """Wait, for a while, until the old identity's drivers stopped and the elector stepped down."""
        deadline = time.monotonic() + STEP_DOWN_WAIT_S
        driving = [task for task in self.engine.tasks.values() if not task.done()]
        if driving:
            await asyncio.wait(driving, timeout=STEP_DOWN_WAIT_S)
        while self.elector.leading and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if self.engine.driving() or self.elector.leading:
            log.error("drivers or the elector of %s still ran after %.0f s; letting its mark go",
                      self.engine.deps.holder, STEP_DOWN_WAIT_S)  # fmt: skip

    async def _hand_over(self, run_ids: list[str]) -> None:
        """Give each run handed back to the least loaded other live process now, which takes it up when
        told (handoffs), instead of leaving it queued for the sweep's grace. This process is draining, so
        it is never the one chosen (run_targets); with no other process the run stays queued."""
        deps = self.engine.deps
        for run_id in run_ids:
            given = await deps.store.hand(run_id, deps.holder, self.settings.lease_ttl_s)
            if given is None:
                log.info("run %s stays queued: no other live process to hand it to", run_id)
            else:
                log.info("handed run %s over to process %s (attempt %s)", run_id, given.holder, given.attempt)

    async def stop(self) -> None:
        """Stop cleanly: step down, stop each run at its next step boundary (within the grace period) and
        hand it over to another live process at once (it goes on there without counting a loss), say we
        ended, free the liveness mark."""
        self._stopping = True
        if self._reincarnation is not None:
            self._reincarnation.cancel()
            await asyncio.gather(self._reincarnation, return_exceptions=True)
        await self.elector.stop()
        try:
            # No more runs are given to this process; those given and not taken up go back (queued).
            given_back = await self.engine.deps.store.drain(self.engine.deps.holder)
            if given_back:
                log.info("gave back %d runs given to this process and not taken up", len(given_back))
            await self._hand_over(given_back)
        except StorageError as exc:
            log.error("could not give back the runs given to this process (%s); their leases will lapse", exc)
        await self.handoffs.stop()
        # Jobs are handed back beside the runs: resumable ones at once, the others after the grace.
        held, _ = await asyncio.gather(self.engine.shutdown(self.settings.shutdown_grace_s),
                                       self.jobs.stop(self.settings.shutdown_grace_s))  # fmt: skip
        await self.keeper.stop()
        try:
            handed = await self.engine.deps.store.hand_back(self.engine.deps.holder, held)
            if handed:
                log.info("handed back %d runs", len(handed))
            await self._hand_over(handed)
        except StorageError as exc:
            log.error("could not hand runs back (%s); their leases will lapse and be swept", exc)
        await self.liveness.stop(self.db)
        await self.credential_check.stop()
        await self.views.feed.stop()
        await self.engine.deps.gate_watch.stop()
        await self.model.close()
        if self.mcp is not None:
            await self.mcp.stop()  # a stdio server, a child of this process, stops with it
        await self.http.aclose()
        if tracing.ON:
            await asyncio.to_thread(tracing.flush, TRACES_FLUSH_S)  # the spans of the runs handed over, sent
        await self.db.close()
        if self.server_watch is not None:
            await self.server_watch.stop()
        self.target.release()


async def check_key_probe(db: Database, keys: seal.SealKeys) -> None:
    """I17: refuse to start unless these keys verify the cluster's key probe. The first process of a
    cluster writes it; a process that signs with a new key it verified the probe with moves it there."""
    key_id, made = seal.probe(keys)
    probes = SealProbeStore(db)
    await probes.offer(key_id, made)
    found_key_id, found_seal = await probes.probe()
    seal.check_probe(keys, found_key_id, found_seal)
    if found_key_id != key_id:
        await probes.move(key_id, made, found_key_id)
        log.warning("the cluster now signs with seal key %s (was %s)", key_id, found_key_id)
