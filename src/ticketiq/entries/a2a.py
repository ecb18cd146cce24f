"""The A2A entry point: the agent card (open) and the JSON-RPC endpoint, on the a2a-sdk's server classes.

JSON-RPC at `/a2a` is the sdk's `JsonRpcDispatcher` (protocol 1.0 names: SendMessage,
SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask; with its v0.3 compat layer on
the same endpoint: message/send, message/stream, tasks/get, tasks/cancel, tasks/resubscribe) over our
`RunRequestHandler` (entries/a2a_tasks.py) and the task store on our Postgres (storage/task_store.py).
The one thing judged before the dispatcher is what its parse would lose (a2a_refusals.py: a ListTasks
`status` that names no task state). The card is served in the version the client asks for (a2a_card.py).

A2A callers authenticate as the agent card says: the API's bearer tokens, checked by `BearerAuth`
before anything is parsed. The token's principal goes to the sdk in its call context; the token
itself never does (nor into any log).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, VERSION_HEADER
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ticketiq.agents.catalog import Catalog
from ticketiq.auth import tokens
from ticketiq.entries import a2a_refusals, auth
from ticketiq.entries.a2a_card import RPC_PATH, agent_card, card_in_version, default_agent, rpc_url
from ticketiq.entries.a2a_tasks import RunRequestHandler, describe_waiting
from ticketiq.intake.a2a_messages import PRINCIPAL
from ticketiq.process import AppProcess
from ticketiq.settings import Settings
from ticketiq.storage.database import Database
from ticketiq.storage.task_store import CALLER, Caller, RunTaskStore, Waits
from ticketiq.views.runs import RunViews

log = logging.getLogger(__name__)

# How long the sdk may take to stop following its tasks before it is made to (see A2AServer.close).
CLOSE_WITHIN_S = 2.0


class TokenUser(User):
    """The sdk's view of who calls: the API token, by its name."""

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.name


class CallerContext(DefaultServerCallContextBuilder):
    """The sdk's call context of a request: who calls (from `BearerAuth`), the headers but the token."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        # The sdk keeps the headers in its context (it reads A2A-Version there) and may log the context.
        context.state["headers"].pop("authorization", None)
        principal = auth.acting(request)
        context.user = TokenUser(principal.name)
        context.state[PRINCIPAL] = principal
        context.state[CALLER] = Caller(principal.name, tokens.run_scope(principal))
        return context


@dataclass
class A2AServer:
    catalog: Catalog
    settings: Settings
    default_agent: str
    handler: RunRequestHandler
    dispatcher: JsonRpcDispatcher

    @classmethod
    def start(cls, views: RunViews, db: Database, settings: Settings) -> A2AServer:
        engine = views.engine
        catalog = engine.deps.catalog
        default = default_agent(catalog, settings.a2a_default_agent)

        async def waiting(run_id: str) -> Waits:
            return describe_waiting(await engine.waiting_for(run_id))

        tasks = RunTaskStore(db, waiting)
        # The handler reads only the card's capabilities; the URL it names is per request (see `card`).
        handler = RunRequestHandler(views, tasks, agent_card(catalog, default, RPC_PATH), default)
        dispatcher = JsonRpcDispatcher(handler, context_builder=CallerContext(), enable_v0_3_compat=True)
        return cls(catalog, settings, default, handler, dispatcher)

    def card_for(self, request: Request) -> JSONResponse:
        """The card in the protocol version the client asks for (`A2A-Version`, as a header or a query
        parameter): 1.0 gets the card of the 1.0 schema; none, as a 0.3 client sends, gets it with the 0.3
        fields besides."""
        base = self.settings.a2a_public_url or str(request.base_url)
        card = agent_card(self.catalog, self.default_agent, rpc_url(base))
        asked = request.headers.get(VERSION_HEADER) or request.query_params.get(VERSION_HEADER)
        # The body depends on the header: a cache keeps one per version.
        return JSONResponse(card_in_version(card, asked), headers={"Vary": VERSION_HEADER})

    async def close(self) -> None:
        """Tasks followed in memory stop following; their runs go on, driven by the engine. The sdk's drain
        (a2a-sdk 1.3, `ActiveTask.aclose`) cancels a task's follower and reader together, and a follower
        cancelled with events its reader never took waits in its `finally` for them to be taken: the
        process would never stop. Cancelled once more, after CLOSE_WITHIN_S, the follower ends."""
        try:
            await asyncio.wait_for(self.handler.aclose(), CLOSE_WITHIN_S)
        except TimeoutError:
            log.warning("A2A: the tasks still followed were stopped after %.0f s", CLOSE_WITHIN_S)


def start(app: FastAPI) -> None:
    """Called by the app's lifespan once its process is up: the server for the routes below."""
    process: AppProcess = app.state.process
    app.state.a2a = A2AServer.start(process.views, process.db, process.settings)


async def close(app: FastAPI) -> None:
    """Called by the app's lifespan before its process stops."""
    server: A2AServer | None = getattr(app.state, "a2a", None)
    if server is not None:
        await server.close()


def add_routes(router: APIRouter) -> None:
    """The card and the JSON-RPC endpoint, among the API's own routes (so each is listed and tested like the
    others)."""

    def server(request: Request) -> A2AServer:
        found: A2AServer = request.app.state.a2a
        return found

    @router.get(AGENT_CARD_WELL_KNOWN_PATH, summary="The A2A agent card (no token needed)", tags=["A2A"])
    async def card(request: Request) -> JSONResponse:
        return server(request).card_for(request)

    @router.post(RPC_PATH, summary="A2A JSON-RPC (protocol 1.0 and 0.3 method names)", tags=["A2A"])
    async def rpc(request: Request) -> Response:
        try:
            body = await request.json()  # kept by the request: the dispatcher parses it no second time
        except ValueError:
            body = None  # the dispatcher answers -32700
        refused = a2a_refusals.refused_params(body)
        if refused is not None:
            return refused
        return await server(request).dispatcher.handle_requests(request)
