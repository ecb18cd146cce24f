"""Who may do what over HTTP: bearer tokens, roles, and the token routes (DESIGN.md, "Who may do what").

`BearerAuth` authenticates every request but the open ones before anything else is done with it: no
route is matched, no body read, nothing written for a request without a valid token (401). A route
then names the permission it needs (`requires`), refused with 403 naming it. The token's name is the
actor of whatever the request does. Neither a token nor its hash is ever logged or echoed.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal, Role
from ticketiq.engine.engine import Engine
from ticketiq.entries import a2a_refusals
from ticketiq.entries.idempotency import IdempotencyKey, header_error, once
from ticketiq.entries.json_answer import storage_refusal
from ticketiq.errors import Conflict, Forbidden, NotFound, StorageError
from ticketiq.storage.token_store import StoredToken, TokenStore
from ticketiq.views.follows import Credential

log = logging.getLogger(__name__)

# Answered without a token: probes and scrapers, the API's own description, and the A2A agent card
# (A2A clients read it to learn how to authenticate).
OPEN_PATHS = frozenset({
    "/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc",
    "/.well-known/agent-card.json",
})  # fmt: skip
# Entry points from outside that authenticate as their protocol does (DESIGN.md, "Who may do what"):
# let through here, each route checks its own signature before anything is stored. Path templates: a
# `{name}` matches one path segment.
SIGNED_PATHS = ("/v1/hooks/{name}", "/v1/ticket-events", "/v1/teams/messages")  # the last: a Bot Framework JWT


def _paths_of(templates: tuple[str, ...]) -> re.Pattern[str]:
    """The paths a list of route templates matches, a `{name}` standing for one path segment."""
    return re.compile("|".join(re.sub(r"\\{\w+\\}", "[^/]+", re.escape(t)) for t in templates))


_SIGNED = _paths_of(SIGNED_PATHS)
HOW = "send `Authorization: Bearer <token>`; `ticketiq tokens create` makes one"
# The console's pages check its own sign-in session (`console/sessions.py`). Its session also authenticates
# exactly the reads its script makes (console.js: the list's refresh, a run's events), GET and HEAD only,
# so a cookie can never change anything through the API, nor read what no console page needs. The
# docs/operate.md's section "The console" lists the same routes (tests/integration/test_console.py compares them).
CONSOLE = "/console"
SESSION_READS = ("/v1/runs", "/v1/runs/{run_id}/events")
_SESSION_READS = _paths_of(SESSION_READS)
SESSION_METHODS = frozenset({"GET", "HEAD"})

# Documents the scheme in the OpenAPI (`describe_bearer`); the check itself is `BearerAuth`'s.
BEARER = HTTPBearer(auto_error=False, scheme_name="bearer", description="A token from `ticketiq tokens create`.")


def _refused(status: int, message: str, challenge: str | None = None) -> JSONResponse:
    headers = {"WWW-Authenticate": challenge} if challenge else None
    body = {"detail": [{"loc": ["header", "Authorization"], "msg": message}]}
    return JSONResponse(body, status_code=status, headers=headers)


class BearerAuth:
    """Pure ASGI middleware: a request to any path but the open ones is refused 401 unless it carries
    an unrevoked token, else it goes on with its `Principal` in `request.state.principal`."""

    def __init__(
        self,
        app: ASGIApp,
        store: Callable[[Scope], TokenStore],
        session: Callable[[HTTPConnection], Awaitable[tuple[Principal, str] | None]] | None = None,
    ) -> None:
        self.app = app
        self.store = store
        self.session = session  # the console's: whom a sign-in session acts as, and the session's id hash

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or is_open(route_path(scope)) or is_console(route_path(scope)):
            await self.app(scope, receive, send)
            return
        found = await self._authenticate(scope)
        if isinstance(found, tuple):
            state = scope.setdefault("state", {})
            state["principal"], state["session"] = found
            await self.app(scope, receive, send)
        else:
            # On the A2A endpoint: a JSON-RPC error, with the same status and challenge.
            await a2a_refusals.in_kind(scope, found)(scope, receive, send)

    async def _authenticate(self, scope: Scope) -> tuple[Principal, str | None] | JSONResponse:
        """The principal the request acts as (with the id hash of the console session that lent it, if one
        did), or the response that refuses it."""
        token = tokens.bearer(Headers(scope=scope).get("authorization"))
        if token is None and (self.session is None or not session_may_read(scope["method"], route_path(scope))):
            return _refused(401, f"no bearer token: {HOW}", 'Bearer realm="ticketiq"')
        invalid = 'Bearer realm="ticketiq", error="invalid_token"'
        if token is not None and not tokens.well_formed(token):
            return _refused(401, f"the bearer token is malformed: {HOW}", invalid)
        try:
            if token is None:
                assert self.session is not None
                lent = await self.session(HTTPConnection(scope))
                return lent or _refused(401, f"no bearer token: {HOW}", 'Bearer realm="ticketiq"')
            found = await self.store(scope).credential(tokens.token_hash(token))
        except StorageError as exc:
            # Not the exception's text: a driver message could quote a parameter, here the hash.
            log.error("%s %s: could not check the bearer token (sqlstate %s)", scope["method"], scope["path"],
                      exc.sqlstate)  # fmt: skip
            return storage_refusal(exc)
        if found is None or not tokens.matches(token, found.token_hash):
            return _refused(401, f"the bearer token is unknown or revoked: {HOW}", invalid)
        agents = None if found.agents is None else frozenset(found.agents)
        return Principal(found.name, Role(found.role), agents), None


def refused_ended(why: str) -> JSONResponse:
    """401 for a request whose credential was heard ended after it was authenticated (`views/follows.py`)."""
    return _refused(401, f"the credential of this request ended ({why}): {HOW}",
                    'Bearer realm="ticketiq", error="invalid_token"')  # fmt: skip


def is_open(path: str) -> bool:
    """Whether a path is answered without a bearer token: an open path, or a signed entry point's."""
    return path in OPEN_PATHS or _SIGNED.fullmatch(path) is not None


def is_console(path: str) -> bool:
    """A console page: let through to the console's own sign-in check."""
    return path == CONSOLE or path.startswith(CONSOLE + "/")


def session_may_read(method: str, path: str) -> bool:
    """Whether a console session may authenticate this request: one of `SESSION_READS`, nothing else."""
    return method in SESSION_METHODS and _SESSION_READS.fullmatch(path) is not None


def route_path(scope: Scope) -> str:
    """The path the router matches: behind a proxy's root path, `path` still carries it."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def acting(request: Request) -> Principal:
    """The principal `BearerAuth` found for this request."""
    principal: Principal | None = getattr(request.state, "principal", None)
    if principal is None:  # only if a route were served without the middleware: refuse, never guess
        raise Forbidden("header.Authorization", f"this request was not authenticated: {HOW}")
    return principal


def credential(request: Request) -> Credential:
    """What the request was authenticated by: its token, or the console session acting as it. A follow it
    opens ends when that ends (`views/follows.py`)."""
    return Credential(acting(request).name, getattr(request.state, "session", None))


def requires(permission: Permission) -> Callable[..., Awaitable[Principal]]:
    """A dependency: the acting principal when its role holds the permission, else 403. It runs before
    the body is validated, so a refused request learns nothing about the route and writes nothing."""

    async def check(request: Request) -> Principal:
        principal = acting(request)
        refusal = tokens.refusal(principal, permission)
        if refusal is not None:
            raise Forbidden("header.Authorization", refusal)
        return principal

    check.guards = True  # type: ignore[attr-defined]  # `describe_bearer` finds the routes it guards by this
    return check


def describe_bearer(app: FastAPI, router: APIRouter) -> None:
    """The bearer scheme in the API's description, on every operation of `router` (included in `app`) a
    `requires` guards. Written into
    the description rather than declared as a dependency of each route (`Depends(BEARER)`): FastAPI
    solves a dependency on every request, a third of a guarded route's own cost, for a header
    `BearerAuth` has read already."""
    made = app.openapi

    def described() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = made()
        guarded = False
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema and _guarded(route):
                guarded = True
                for method in route.methods or ():
                    operation = schema["paths"].get(route.path_format, {}).get(method.lower())
                    if operation is not None:
                        operation["security"] = [{BEARER.scheme_name: []}]
        if guarded:
            schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
            schemes[BEARER.scheme_name] = BEARER.model.model_dump(mode="json", by_alias=True, exclude_none=True)
        return schema

    app.openapi = described  # type: ignore[method-assign]


def _guarded(route: APIRoute) -> bool:
    return any(getattr(d.call, "guards", False) for d in route.dependant.dependencies)


# ----- the token routes (admin) ------------------------------------------------------------------------

TokenAdmin = Annotated[Principal, Depends(requires(Permission.MANAGE_TOKENS))]


class TokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1, max_length=100)
    role: Role
    agents: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(default=None, max_length=1000)


class TokenShown(BaseModel):
    name: str
    role: str
    agents: list[str] | None
    created_at: datetime
    revoked_at: datetime | None


class TokenIssued(TokenShown):
    token: str = Field(description="Shown this once; only its SHA-256 is kept.")


def _shown(token: StoredToken) -> dict[str, Any]:
    agents = None if token.agents is None else list(token.agents)
    return {"name": token.name, "role": token.role, "agents": agents, "created_at": token.created_at,
            "revoked_at": token.revoked_at}  # fmt: skip


def _made_once(issued: TokenIssued) -> Response:
    """What a repeat of a token's creation gets: never the secret again (it is stored nowhere)."""
    return header_error(409, f"this Idempotency-Key already created token {issued.name}; its secret was shown once "
                             "and is kept nowhere: revoke that token and create another")  # fmt: skip


def add_routes(router: APIRouter, engine: Callable[[Request], Engine], store: Callable[[Request], TokenStore]) -> None:
    @router.get("/v1/tokens")
    async def every(request: Request, _: TokenAdmin) -> dict[str, list[TokenShown]]:
        return {"tokens": [TokenShown(**_shown(t)) for t in await store(request).every()]}

    @router.post("/v1/tokens", status_code=201, response_model=TokenIssued)
    async def create(
        body: TokenRequest, request: Request, admin: TokenAdmin, idempotency_key: IdempotencyKey
    ) -> Response:
        async def issue() -> TokenIssued:
            name = tokens.checked_name(body.name)
            agents = tokens.checked_agents(body.agents, engine(request).deps.catalog.agents)
            token = tokens.mint()
            made = await store(request).create(name, body.role.value, agents, tokens.token_hash(token), admin.name)
            if made is None:
                raise Conflict("body.name", f"a token named {name} exists; names are never reused, even once revoked")
            return TokenIssued(**_shown(made), token=token)

        # The secret is kept nowhere, not for a repeat either: the repeat is told what its key made.
        asked = body.model_dump(mode="json")
        return await once(request, "POST /v1/tokens", admin, idempotency_key, asked, issue, kept_as=_made_once)

    @router.delete("/v1/tokens/{name}")
    async def revoke(name: str, request: Request, admin: TokenAdmin) -> TokenShown:
        revoked = await store(request).revoke(name, admin.name)
        if revoked is not None:
            return TokenShown(**_shown(revoked))
        existing = await store(request).get(name)
        if existing is None:
            raise NotFound("path.name", f"no token named {name}")
        raise Conflict("path.name", f"token {name} was revoked already, at {existing.revoked_at}")
