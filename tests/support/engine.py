"""An app process in the test's event loop, over real sockets: the scripted model stand-in, a probe
vendor that records what reaches it (and can look at the database at that instant), and the engine."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import yaml
from fastapi import FastAPI, Request
from psycopg.rows import dict_row

from tests.support.http import serving
from ticketiq.auth import tokens
from ticketiq.process import AppProcess
from ticketiq.settings import Settings
from ticketiq.standins.model import create_router
from ticketiq.storage.token_store import TokenStore
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass

# The tests' processes keep one pooled connection open, not the product's two: a process in a test serves a
# handful of requests, and each connection opened is a server backend started (some 10 ms of the server's
# CPU on a 2-core machine; the suite starts about a thousand processes). The pool still grows under load.
TEST_POOL_MIN = 1
OBJECT = {"type": "object", "properties": {"note": {"type": "string"}}, "additionalProperties": False}


@dataclass
class Probe:
    """A vendor for engine tests. Every request is recorded; `on_receive` runs before it answers;
    `hold` (when set) keeps reads waiting until the test releases them."""

    received: list[dict[str, Any]] = field(default_factory=list)
    on_receive: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    hold: asyncio.Event | None = None
    in_flight: int = 0
    max_in_flight: int = 0

    def writes(self) -> list[dict[str, Any]]:
        return [r for r in self.received if r["kind"] != "read"]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/probe/{kind}")
        async def receive(kind: str, request: Request) -> dict[str, Any]:
            body = await request.json()
            record = {
                "kind": kind,
                "key": body.get("key"),
                "args": body.get("args"),
                "run_id": body.get("run_id"),
                "traceparent": request.headers.get("traceparent"),  # runtime/tracing.py: the call's span
            }
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                self.received.append(record)
                if self.on_receive is not None:
                    await self.on_receive(record)
                if self.hold is not None and kind == "read":
                    await self.hold.wait()
                return {"ok": True, "kind": kind, "key": body.get("key")}
            finally:
                self.in_flight -= 1

        return app


def probe_tools(base_url: str) -> list[Tool]:
    def sender(kind: str) -> Callable[[CallContext], Awaitable[Outcome]]:
        async def send(ctx: CallContext) -> Outcome:
            ctx.before_send()
            response = await ctx.http.post(
                f"{base_url}/probe/{kind}", json={"key": ctx.key, "args": ctx.args, "run_id": ctx.run_id}
            )
            return Outcome(ok=response.status_code == 200, result=response.json())

        return send

    async def never_found(ctx: CallContext) -> ReadBack:
        return ReadBack(found=None)

    return [
        Tool("probe_read", "read from the probe", OBJECT, ToolClass.READ, sender("read")),
        Tool("probe_write", "write to the probe", OBJECT, ToolClass.WRITE, sender("write"), reader=never_found),
        # A write with no reader and no dedupe (a webhook's like): a restored run's waits for an operator (I24).
        Tool("probe_blind", "write to the probe, never found again", OBJECT, ToolClass.WRITE, sender("blind")),
        Tool(
            "probe_keyed",
            "keyed write",
            OBJECT,
            ToolClass.KEYED_WRITE,
            sender("keyed"),
            dedupe_window_s=float("inf"),
        ),
    ]


@dataclass
class Harness:
    process: AppProcess
    probe: Probe
    model_url: str
    settings: Settings
    # Every step the model stand-in answered: (script, conversation, step). A step asked twice for one
    # conversation is a model step asked again.
    asked: list[tuple[str, str, int]] = field(default_factory=list)

    @property
    def engine(self) -> Any:
        return self.process.engine

    async def run(self, agent: str, text: str = "Look at OPS-1", **kw: Any) -> str:
        catalog_agent = self.process.engine.deps.catalog.get(agent)
        assert catalog_agent is not None
        created = await self.process.engine.create_run(catalog_agent, text, **kw)
        return str(created.id)

    async def token(self, name: str, role: str = "admin", agents: list[str] | None = None) -> str:
        """A bearer token in the test database, made as `ticketiq tokens create` makes one."""
        token = tokens.mint()
        made = await TokenStore(self.process.db).create(name, role, agents, tokens.token_hash(token), "test")
        assert made is not None, f"a token named {name} exists"
        return token

    async def finish(self, run_id: str, timeout_s: float = 30.0) -> dict[str, Any]:
        """Start the run and wait until its driver task ends; return the run's row."""
        assert await self.process.engine.start(run_id)
        task = self.process.engine.tasks.get(run_id)
        if task is not None:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        row = await self.process.db.fetch_one("runs.get", {"run_id": run_id})
        assert row is not None
        return row


def agents_file(
    tmp: Path,
    agents: dict[str, dict[str, Any]],
    approval: list[str] | None = None,
    workflows: dict[str, dict[str, Any]] | None = None,
) -> Path:
    spec: dict[str, Any] = {"agents": {}, "approval_required": approval or []}
    if workflows:
        spec["workflows"] = workflows
    for name, extra in agents.items():
        spec["agents"][name] = {
            "model": name,
            "system_prompt": f"You are {name}.",
            "owner": "tester",
            "tenant": "t1",
            "may_wait": True,
            **extra,
        }
    path = tmp / "agents.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@contextlib.asynccontextmanager
async def engine_under_test(
    db_url: str,
    tmp: Path,
    scripts: dict[str, list[dict[str, Any]]],
    agents: dict[str, dict[str, Any]],
    *,
    probe: Probe | None = None,
    latency_ms: int = 0,
    position_ids: bool = False,
    approval: list[str] | None = None,
    workflows: dict[str, dict[str, Any]] | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    probe = probe or Probe()
    folder = tmp / "scripts"
    folder.mkdir(exist_ok=True)
    for name, steps in scripts.items():
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({"steps": steps}))
    asked: list[tuple[str, str, int]] = []

    async def log_request(model: str, conversation: str, step: int) -> None:
        asked.append((model, conversation, step))

    model_app = FastAPI()
    model_app.include_router(create_router(latency_ms, position_ids, scripts=folder, log_request=log_request))
    async with serving(model_app) as model_url, serving(probe.app()) as probe_url:
        settings = Settings(
            home=tmp,
            database_url=db_url,
            model_base_url=f"{model_url}/v1",
            seal_keys="test:engine-test-secret",
            agents=agents_file(tmp, agents, approval, workflows),
            **{"db_pool_min": TEST_POOL_MIN, **overrides},
        )
        process = await AppProcess.start(settings, extra_tools=probe_tools(probe_url))
        try:
            yield Harness(process, probe, model_url, settings, asked)
        finally:
            await process.stop()


# The connections `read_rows` keeps for the test under way, one a database, on the session's loop; closed when
# the test ends (`kept_reads` in tests/conftest.py). A connection made for each read started a server
# backend each time: a quarter of all the suite's backends, most of them a waiting test's polls.
_kept: dict[str, psycopg.AsyncConnection[dict[str, Any]]] = {}
_kept_on: list[asyncio.AbstractEventLoop] = []


async def _connected(db_url: str) -> psycopg.AsyncConnection[dict[str, Any]]:
    return await psycopg.AsyncConnection.connect(db_url, autocommit=True, row_factory=dict_row)


async def read_rows(db_url: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """A query as another process would see the database right now: in autocommit, each statement its own
    snapshot, on a connection that holds nothing between queries. On a loop of a test's own (a thread),
    on a connection made for it."""
    if not _kept_on or asyncio.get_running_loop() is not _kept_on[0]:
        async with await _connected(db_url) as own:
            cur = await own.execute(sql, params)
            return await cur.fetchall() if cur.description else []
    conn = _kept.get(db_url)
    if conn is None or conn.closed:
        conn = _kept[db_url] = await _connected(db_url)
    try:
        cur = await conn.execute(sql, params)
    except psycopg.OperationalError:
        if not conn.broken:
            raise
        # Its server was killed or restarted under it (a test did that): once more on a new connection.
        conn = _kept[db_url] = await _connected(db_url)
        cur = await conn.execute(sql, params)
    return await cur.fetchall() if cur.description else []


@contextlib.asynccontextmanager
async def reads_kept() -> AsyncIterator[None]:
    """`read_rows` keeps its connections on this loop until the block ends, then closes them."""
    _kept_on[:] = [asyncio.get_running_loop()]
    try:
        yield
    finally:
        _kept_on.clear()
        kept = list(_kept.values())
        _kept.clear()
        for conn in kept:
            await conn.close()


async def kill_liveness(db_url: str, holder: str) -> None:
    """The process's liveness connection dies under it, as a SIGKILL (or a network cut) leaves it: the
    server ends the backend holding its mark; the process loses every lease at once and the leader
    takes its runs and jobs back."""
    held_by = await mark_session(db_url, holder)
    assert held_by is not None, f"{holder} holds no liveness mark"
    ended = await read_rows(db_url, "SELECT pg_terminate_backend(%s) AS ended", held_by)
    assert [r["ended"] for r in ended] == [True]


async def mark_session(db_url: str, holder: str) -> int | None:
    """The server backend holding `holder`'s liveness mark in this database, if any (the server's other
    databases hold marks of the same keys: each test's database counts its processes from the same start)."""
    rows = await read_rows(db_url, """
        SELECT l.pid FROM pg_locks l JOIN processes p ON l.locktype = 'advisory' AND l.classid = 7117::oid
                                    AND l.objid = p.lock_key::oid AND l.objsubid = 2 AND l.granted
         WHERE p.id = %s AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())""",
        holder)  # fmt: skip
    return int(rows[0]["pid"]) if rows else None


async def inputs_of(db_url: str, run_id: str) -> list[tuple[str, str, str | None]]:
    """The questions a run asked, in order: (question, status, the input given)."""
    rows = await read_rows(db_url, "SELECT question, status, text FROM inputs WHERE run_id = %s ORDER BY step, idx",
                           run_id)  # fmt: skip
    return [(r["question"], r["status"], r["text"]) for r in rows]
