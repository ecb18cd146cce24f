"""Routes that change the gates' state. Each change and its audit row land in one transaction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.process import AppProcess


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


def add_routes(app: FastAPI, proc: Callable[[Request], AppProcess]) -> None:
    async def change(
        request: Request,
        query: str,
        params: dict[str, Any],
        by: str,
        before: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        async with proc(request).db.transaction() as tx:
            if before is not None:
                await tx.execute(*before)
            await tx.execute(query, params)
            await tx.execute("gates.audit", {"by": by, "detail": {"change": query, **params}})
        return {"ok": True, **params}

    @app.get("/v1/gates")
    async def state(request: Request) -> dict[str, Any]:
        row = await proc(request).db.fetch_one("gates.state")
        return dict(row or {})

    @app.put("/v1/gates/quarantines/{kind}/{name}")
    async def quarantine(
        kind: Literal["agent", "tenant"], name: str, body: Quarantine, request: Request
    ) -> dict[str, Any]:
        return await change(request, "gates.quarantine", {"kind": kind, "name": name, "reason": body.reason}, body.by)

    @app.delete("/v1/gates/quarantines/{kind}/{name}")
    async def release(kind: Literal["agent", "tenant"], name: str, request: Request) -> dict[str, Any]:
        return await change(request, "gates.release_quarantine", {"kind": kind, "name": name}, "api")

    @app.put("/v1/gates/channels/{name}")
    async def channel(name: str, body: Enabled, request: Request) -> dict[str, Any]:
        return await change(request, "gates.set_channel", {"name": name, "enabled": body.enabled}, body.by)

    @app.put("/v1/gates/grants/{principal}/{tool}")
    async def grant(principal: str, tool: str, body: Granted, request: Request) -> dict[str, Any]:
        return await change(
            request,
            "gates.set_grant",
            {"principal": principal, "tool": tool, "granted": body.granted},
            body.by,
            before=("gates.seed_principal", {"name": principal}),
        )

    @app.put("/v1/gates/principals/{name}")
    async def principal(name: str, body: MayRun, request: Request) -> dict[str, Any]:
        return await change(request, "gates.set_may_run", {"name": name, "may_run": body.may_run}, body.by)

    @app.put("/v1/gates/policies/{tool}")
    async def policy(tool: str, body: NeedsApproval, request: Request) -> dict[str, Any]:
        return await change(request, "gates.set_policy", {"tool": tool, "needs_approval": body.needs_approval}, body.by)
