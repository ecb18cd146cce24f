"""Routes that read and change the gates' state. Each change and its audit row land in one transaction.

Reading takes an operator's token, changing an admin's; the change is audited as the token's name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import Engine
from ticketiq.entries.auth import requires

Reader = Annotated[Principal, Depends(requires(Permission.READ_GATES))]
Admin = Annotated[Principal, Depends(requires(Permission.CHANGE_GATES))]
# A gate's names are keys of indexed rows: bounded, so no name can exceed what an index row takes.
Name = Annotated[str, Path(min_length=1, max_length=200)]


class Change(BaseModel):
    # No `by`: who changed a gate is the token's name, never a field a client asserts.
    model_config = ConfigDict(extra="forbid")


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


def add_routes(router: APIRouter, engine: Callable[[Request], Engine]) -> None:
    def ok(params: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, **params}

    @router.get("/v1/gates")
    async def state(request: Request, _: Reader) -> dict[str, Any]:
        return await engine(request).gates.state()

    @router.put("/v1/gates/quarantines/{kind}/{name}")
    async def quarantine(
        kind: Literal["agent", "tenant"], name: Name, body: Quarantine, request: Request, admin: Admin
    ) -> dict[str, Any]:
        return ok(await engine(request).gates.quarantine(kind, name, body.reason, admin.name))

    @router.delete("/v1/gates/quarantines/{kind}/{name}")
    async def release(kind: Literal["agent", "tenant"], name: Name, request: Request, admin: Admin) -> dict[str, Any]:
        return ok(await engine(request).gates.release(kind, name, admin.name))

    @router.put("/v1/gates/channels/{name}")
    async def channel(name: Name, body: Enabled, request: Request, admin: Admin) -> dict[str, Any]:
        return ok(await engine(request).gates.set_channel(name, body.enabled, admin.name))

    @router.put("/v1/gates/grants/{principal}/{tool}")
    async def grant(principal: Name, tool: Name, body: Granted, request: Request, admin: Admin) -> dict[str, Any]:
        return ok(await engine(request).gates.set_grant(principal, tool, body.granted, admin.name))

    @router.put("/v1/gates/principals/{name}")
    async def principal(name: Name, body: MayRun, request: Request, admin: Admin) -> dict[str, Any]:
        return ok(await engine(request).gates.set_may_run(name, body.may_run, admin.name))

    @router.put("/v1/gates/policies/{tool}")
    async def policy(tool: Name, body: NeedsApproval, request: Request, admin: Admin) -> dict[str, Any]:
        return ok(await engine(request).gates.set_policy(tool, body.needs_approval, admin.name))
