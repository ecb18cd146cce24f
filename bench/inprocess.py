"""An in-process model and tools for the benchmarks: the same scripted answers as the stand-in, with
no HTTP, and clocks around both so the engine's own time can be told apart."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psycopg

from ticketiq.dbserver import embedded
from ticketiq.model.client import ModelReply, reply_from_body
from ticketiq.standins.model import ScriptedModel, completion
from ticketiq.storage.migrate import migrate
from ticketiq.tools.base import CallContext, Outcome, Tool, ToolClass

OBJECT = {"type": "object", "properties": {"note": {"type": "string"}}, "additionalProperties": False}


@dataclass
class Clock:
    """Time spent inside the model and the tools, and when each model request began and ended."""

    model_s: float = 0.0
    tools_s: float = 0.0
    model_calls: list[tuple[float, float]] = field(default_factory=list)
    tool_calls: list[tuple[float, float]] = field(default_factory=list)


class InProcessModel:
    def __init__(self, scripts: Path, clock: Clock, latency_s: float = 0.0) -> None:
        self.scripted = ScriptedModel(scripts)
        self.clock = clock
        self.latency_s = latency_s

    async def complete(self, *, model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> ModelReply:
        started = time.perf_counter()
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        answer = self.scripted.reply(model, messages)
        # The bytes a model server sends, read as the client reads them: the whole step's model part.
        reply = reply_from_body(orjson.dumps(completion(model, messages, answer)), model, 0.0)
        ended = time.perf_counter()
        self.clock.model_s += ended - started
        self.clock.model_calls.append((started, ended))
        return reply


def fast_tools(clock: Clock) -> list[Tool]:
    async def answer(ctx: CallContext) -> Outcome:
        started = time.perf_counter()
        ctx.before_send()
        result = Outcome(ok=True, result={"note": ctx.args.get("note"), "key": ctx.key})
        ended = time.perf_counter()
        clock.tools_s += ended - started
        clock.tool_calls.append((started, ended))
        return result

    return [
        Tool("bench_read", "a read that answers at once", OBJECT, ToolClass.READ, answer),
        Tool("bench_write", "a write that answers at once", OBJECT, ToolClass.WRITE, answer),
    ]


@contextlib.asynccontextmanager
async def bench_database(folder: Path, *extensions: str) -> AsyncIterator[str]:
    """A migrated database `bench` on an embedded server of its own in `folder`, stopped afterwards."""
    server = embedded.acquire(folder / "home")
    try:
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE DATABASE bench")
        url = server.url("bench")
        async with await psycopg.AsyncConnection.connect(
            url, autocommit=True, row_factory=psycopg.rows.dict_row
        ) as conn:
            await migrate(conn)
            for extension in extensions:
                await conn.execute(f"CREATE EXTENSION IF NOT EXISTS {extension}")
        print(f"Postgres: embedded, {server.url()}")
        yield url
    finally:
        embedded.stop(server.home)
