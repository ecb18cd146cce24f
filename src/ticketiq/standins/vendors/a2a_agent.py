"""A scripted remote A2A agent (protocol 1.0), served with the a2a-sdk's own server classes.

Mounted under `/a2a-agent`: the card at `/a2a-agent/.well-known/agent-card.json`, JSON-RPC at
`/a2a-agent/`. A message starts a task that works for `a2a_agent_work_ms` and then completes with one
text artifact, "remote answer to: <text>"; a message whose text starts with "fail" ends its task
failed instead. The agent answers a message with its task only after `a2a_agent_accept_ms`, so a test
can lose the sender before it learns the task's id.

Tasks live in `standin.a2a_tasks` through the sdk's `TaskStore` interface, so GetTask answers across
restarts of the stand-in (a task that was working when the stand-in stopped stays working: nobody works
it any more, as with a remote agent that lost its worker). The agent dedupes nothing: A2A defines no
dedupe, and a message sent twice starts two tasks. Every message received is logged in
`standin.writes` (vendor `a2a_agent`, operation `send_message`, key: the message id it carried, ref:
the task it started), before the agent answers.
"""

from __future__ import annotations

import asyncio
from datetime import UTC
from typing import Any

from a2a.helpers.proto_helpers import get_message_text
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.server.owner_resolver import resolve_user_scope
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import TaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    ListTasksRequest,
    ListTasksResponse,
    Part,
    Task,
    TaskState,
    TaskStatus,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, DEFAULT_LIST_TASKS_PAGE_SIZE, TransportProtocol
from a2a.utils.proto_utils import parse_lenient
from google.protobuf.json_format import MessageToDict  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ticketiq.standins.records import Answer, Store, Write, jsonb
from ticketiq.standins.vendors.intake import Intake

VENDOR = "a2a_agent"
PREFIX = "/a2a-agent"
ANSWER_PREFIX = "remote answer to: "


class PostgresTaskStore(TaskStore):
    """The sdk's TaskStore on `standin.a2a_tasks`, scoped by owner as the sdk's own stores are."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def save(self, task: Task, context: ServerCallContext) -> None:
        await self.store.fetch_one(
            "standin.a2a_task_save",
            {
                "owner": resolve_user_scope(context),
                "id": task.id,
                "context_id": task.context_id,
                "state": TaskState.Name(task.status.state),
                "task": jsonb(MessageToDict(task)),
            },
        )

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        row = await self.store.fetch_one("standin.a2a_task_get", {"owner": resolve_user_scope(context), "id": task_id})
        return None if row is None else parse_lenient(row["task"], Task())

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """Newest change first; the page token is the offset of the page (the sdk leaves its form open)."""
        offset = int(params.page_token) if params.page_token.isdigit() else 0
        size = params.page_size or DEFAULT_LIST_TASKS_PAGE_SIZE
        after = (
            params.status_timestamp_after.ToDatetime(tzinfo=UTC) if params.HasField("status_timestamp_after") else None
        )
        rows = await self.store.fetch_all(
            "standin.a2a_task_list",
            {
                "owner": resolve_user_scope(context),
                "context_id": params.context_id or None,
                "state": TaskState.Name(params.status) if params.status else None,
                "after": after,
                "offset": offset,
                "limit": size,
            },
        )
        total = int(rows[0]["total"]) if rows else 0
        more = offset + len(rows) < total
        return ListTasksResponse(
            tasks=[parse_lenient(r["task"], Task()) for r in rows],
            next_page_token=str(offset + len(rows)) if more else "",
            page_size=size,
            total_size=total,
        )

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self.store.fetch_one("standin.a2a_task_delete", {"owner": resolve_user_scope(context), "id": task_id})


class ScriptedAgent(AgentExecutor):
    """Works each message for a while, then answers it with a text artifact derived from its text."""

    def __init__(self, intake: Intake) -> None:
        self.intake = intake

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        assert message is not None and task_id is not None and context_id is not None  # the sdk fills them
        # Logged on receipt, before any answer: a sender lost before the answer still sent it.
        await self.intake.store.record(
            Write(VENDOR, "send_message", context_id, message.message_id or None, MessageToDict(message)),
            Answer(200, None, ref=task_id),
        )
        options = self.intake.options
        await asyncio.sleep(options.a2a_agent_accept_ms / 1000)
        if context.current_task is None:
            submitted = TaskStatus(state=TaskState.TASK_STATE_SUBMITTED)
            await event_queue.enqueue_event(
                Task(id=task_id, context_id=context_id, status=submitted, history=[message])
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        await asyncio.sleep(options.a2a_agent_work_ms / 1000)
        text = get_message_text(message)
        if text.lower().startswith("fail"):
            await updater.failed(updater.new_agent_message([Part(text=f"the remote agent could not answer: {text}")]))
            return
        await updater.add_artifact([Part(text=ANSWER_PREFIX + text)], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.task_id is not None and context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card(base_url: str) -> AgentCard:
    """The agent's card; `base_url` is where the stand-ins are served (the card names its own URL)."""
    return AgentCard(
        name="TicketIQ stand-in remote agent",
        description="A scripted remote agent: answers each message, after a while, with a text artifact.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url.rstrip('/')}{PREFIX}/",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version="1.0",
            )
        ],
        capabilities=AgentCapabilities(streaming=False, push_notifications=False),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(
                id="consult",
                name="Consult",
                description="Answers an operations question in text.",
                tags=["operations"],
            )
        ],
    )


class RemoteAgent:
    """The sdk's request handler over the scripted agent and the Postgres task store, as a Starlette app
    to mount at PREFIX. `aclose()` at shutdown drains the tasks it is working."""

    def __init__(self, intake: Intake) -> None:
        # The handler reads only the card's capabilities; the served card names the URL it is asked at.
        self.handler = DefaultRequestHandler(ScriptedAgent(intake), PostgresTaskStore(intake.store), card(""))

    def app(self) -> Starlette:
        async def agent_card(request: Request) -> JSONResponse:
            return JSONResponse(agent_card_to_dict(card(str(request.base_url))))

        routes: list[Any] = [
            Route(AGENT_CARD_WELL_KNOWN_PATH, agent_card, methods=["GET"]),
            *create_jsonrpc_routes(self.handler, rpc_url="/"),
        ]
        return Starlette(routes=routes)

    async def aclose(self) -> None:
        await self.handler.aclose()
