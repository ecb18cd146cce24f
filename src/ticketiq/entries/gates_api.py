"""Routes that read and change the gates' state. Each change and its audit row land in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.engine.engine import Engine


class Change(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="api", min_length=1, max_length=200)


class Quarantine(Change):
    reason: str = Field(default="", max_length=2000)


class Enabled(Change):
    enabled: bool


class Granted(Change):
    granted: bool


class MayRun(Change):
    may_run: bool


class NeedsApproval(Change):
    needs_approval: bool


def add_routes(app: FastAPI, engine: Callable[[Request], Engine]) -> None:
    def ok(params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **params}

    @app.get("/v1/gates")
    async def state(request: Request) -> dict[str, Any]:
        return await engine(request).gates.state()

    @app.put("/v1/gates/quarantines/{kind}/{name}")
    async def quarantine(
        kind: Literal["agent", "tenant"], name: str, body: Quarantine, request: Request
    ) -> dict[str, Any]:
        return ok(await engine(request).gates.quarantine(kind, name, body.reason, body.by))

    @app.delete("/v1/gates/quarantines/{kind}/{name}")
    async def release(kind: Literal["agent", "tenant"], name: str, request: Request) -> dict[str, Any]:
        return ok(await engine(request).gates.release(kind, name, "api"))

    @app.put("/v1/gates/channels/{name}")
    async def channel(name: str, body: Enabled, request: Request) -> dict[str, Any]:
        return ok(await engine(request).gates.set_channel(name, body.enabled, body.by))

    @app.put("/v1/gates/grants/{principal}/{tool}")
    async def grant(principal: str, tool: str, body: Granted, request: Request) -> dict[str, Any]:
        return ok(await engine(request).gates.set_grant(principal, tool, body.granted, body.by))

    @app.put("/v1/gates/principals/{name}")
    async def principal(name: str, body: MayRun, request: Request) -> dict[str, Any]:
        return ok(await engine(request).gates.set_may_run(name, body.may_run, body.by))

    @app.put("/v1/gates/policies/{tool}")
    async def policy(tool: str, body: NeedsApproval, request: Request) -> dict[str, Any]:
        return ok(await engine(request).gates.set_policy(tool, body.needs_approval, body.by))
