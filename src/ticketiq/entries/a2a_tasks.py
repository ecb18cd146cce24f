"""A2A tasks follow runs: what a message asks of the engine, and how a task shows its run.

The sdk's `DefaultRequestHandlerV2` serves the protocol; three of its extension points are ours:

- `RunOfMessage` (its `RequestContextBuilder`, `intake/a2a_messages.py`) turns a message into ONE engine
  call before the sdk makes or touches a task: a new run, or the input its waiting run asked for (I18).
- `RunFollower` (its `AgentExecutor`) follows the run (never drives it: the engine does, wherever it
  runs) and emits the task's status and artifact events as the run changes, until the task ends or
  waits for its client.
- `RunRequestHandler` (the handler itself) serves CancelTask as a Stop (the operator's, as `POST
  /v1/runs/{id}/stop` is), SubscribeToTask by following the run wherever it runs, and a message sent
  again (after its task ended, or an answer its run took already) with that task (`SentBefore`).

Every state an event carries is read from the task store, which derives it from the run: no event can
say what the run does not.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator

from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import Event, EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Permission, Principal
from ticketiq.engine.engine import TERMINAL
from ticketiq.errors import NotFound
from ticketiq.intake.a2a_messages import ENDED, PRINCIPAL, STARTS, RunOfMessage, SentBefore, state_name
from ticketiq.storage.rows import Waiting
from ticketiq.storage.task_store import RunTaskStore, Waits, caller_of
from ticketiq.views.runs import RunViews

WAITS_FOR_CLIENT = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
# A follower wakes on the run's status change (LISTEN/NOTIFY); this bounds a wait all the same.
FOLLOW_S = 5.0
# CancelTask waits this long for a running run to reach its next gate check and end.
CANCEL_WAIT_S = 5.0
# A task parked waiting for its client is let go from memory after this; a later message finds it
# again in the store.
PARKED_S = 300.0


def describe_waiting(waiting: list[Waiting]) -> Waits:
    """What an input-required task's status says: the questions the run asked, then the approvals it
    waits on (which an operator decides, never a message); and the questions with their ids, which the
    status message's metadata carries (`questions`) and an answer may name (`metadata.question_id`)."""
    said = []
    questions = []
    for w in waiting:
        if w.kind == "input":
            said.append(w.question)
            questions.append({"question_id": str(w.question_id), "question": w.question})
        else:
            said.append(f"waiting for an operator to decide approval {w.approval_id} ({w.question}); "
                        "a message cannot answer it")  # fmt: skip
    return Waits("\n".join(said), questions)


class RunFollower(AgentExecutor):
    """Follows a message's run (made or woken by `RunOfMessage`) and emits its task's events."""

    def __init__(self, views: RunViews, tasks: RunTaskStore) -> None:
        self.views = views
        self.engine = views.engine
        self.tasks = tasks

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        run_id, context_id = context.task_id, context.context_id
        assert run_id and context_id, "RunOfMessage sets both"
        if context.call_context is not None and context.call_context.state.get(STARTS) == run_id:
            await self.engine.start(run_id)  # the run this message made: left queued until now
        after = None
        if context.current_task is not None:
            context_id = context.current_task.context_id  # as the sdk's record of the task has it
        else:
            # The run's first message: its task is born with the run's state now (saving it keeps the
            # message and the context).
            now = await self.tasks.progress(run_id, context.call_context, context_id)
            if now is None:
                raise TaskNotFoundError(message=f"no task {run_id}")
            history = [context.message] if context.message is not None else []
            await event_queue.enqueue_event(
                Task(id=run_id, context_id=context_id, status=now.status, artifacts=now.artifacts, history=history)
            )
            after = now.status
        async for event in follow(self.views, self.tasks, run_id, context.call_context, context_id, after):
            await event_queue.enqueue_event(event)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # RunRequestHandler serves CancelTask itself; should the sdk reach this, it is the same Stop.
        assert context.task_id
        _may_stop(context.call_context)
        await self.engine.request_stop(context.task_id, caller_of(context.call_context).name)


async def follow(
    views: RunViews,
    tasks: RunTaskStore,
    run_id: str,
    call: ServerCallContext,
    context_id: str,
    after: TaskStatus | None = None,
) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
    """The task's events from its status `after` on (None: from its status now), until it ends or waits
    for its client. Woken by the run's status changes, wherever the run is driven."""
    run = await views.engine.get_run(run_id)
    if run is None:
        raise TaskNotFoundError(message=f"no task {run_id}")
    seen = run.status  # read before the task is: a change in between is not missed
    while True:
        now = await tasks.progress(run_id, call, context_id)
        if now is None:
            raise TaskNotFoundError(message=f"no task {run_id}")
        if after is None or _changed(after, now.status):
            if now.status.state == TaskState.TASK_STATE_COMPLETED:
                for artifact in now.artifacts:
                    yield TaskArtifactUpdateEvent(task_id=run_id, context_id=context_id, artifact=artifact,
                                                  last_chunk=True)  # fmt: skip
            yield TaskStatusUpdateEvent(task_id=run_id, context_id=context_id, status=now.status)
            after = now.status
        if after.state in ENDED or after.state in WAITS_FOR_CLIENT:
            return
        changed = await views.wait_change(run_id, FOLLOW_S, seen)
        if changed is None:
            raise TaskNotFoundError(message=f"no task {run_id}")
        seen = changed.status


def _may_stop(context: ServerCallContext) -> None:
    """Stop is the operator's: the token's role must hold it, as the REST route's `requires` checks."""
    principal: Principal = context.state[PRINCIPAL]
    refusal = tokens.refusal(principal, Permission.STOP_RUNS)
    if refusal is not None:
        raise TaskNotCancelableError(message=refusal, data={"field": "header.Authorization"})


def _changed(before: TaskStatus, now: TaskStatus) -> bool:
    return before.state != now.state or before.message.message_id != now.message.message_id


class RunRequestHandler(DefaultRequestHandlerV2):
    """The sdk's handler, with the methods where a task is its run rather than the sdk's own record."""

    def __init__(self, views: RunViews, tasks: RunTaskStore, card: AgentCard, default_agent: str) -> None:
        engine = views.engine
        super().__init__(
            agent_executor=RunFollower(views, tasks),
            task_store=tasks,
            agent_card=card,
            request_context_builder=RunOfMessage(engine, tasks, default_agent),
            interrupted_task_timeout=PARKED_S,
        )
        self.views = views
        self.engine = engine
        self.tasks = tasks

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext) -> Message | Task:
        try:
            answer: Message | Task = await super().on_message_send(params, context)
        except SentBefore as sent:
            return apply_history_length(sent.task, params.configuration)
        return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        async with contextlib.aclosing(super().on_message_send_stream(params, context)) as stream:
            try:
                first = await anext(stream)
            except StopAsyncIteration:
                return
            except SentBefore as sent:
                yield apply_history_length(sent.task, params.configuration)
                return
            yield first
            async for event in stream:
                yield event

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task | None:
        """A Stop of the task's run: the operator's, as `POST /v1/runs/{id}/stop` is (DESIGN.md, "Who may
        do what"). A caller's is refused before the task is read, so it learns nothing and stops nothing."""
        validate_proto_required_fields(params)
        _may_stop(context)
        task = await self.tasks.get(params.id, context)
        if task is None:
            raise TaskNotFoundError(message=f"no task {params.id}")
        if task.status.state in ENDED:
            raise TaskNotCancelableError(message=f"task {params.id} has ended ({state_name(task.status.state)})")
        try:
            await self.engine.request_stop(task.id, caller_of(context).name)
        except NotFound:
            raise TaskNotFoundError(message=f"no task {params.id}") from None
        # A queued or waiting run ends at once; a running one at its next gate check.
        deadline = time.monotonic() + CANCEL_WAIT_S
        seen = None
        while (left := deadline - time.monotonic()) > 0:
            status = await self.views.wait_change(task.id, left, seen)
            if status is None or status.status in TERMINAL:
                break
            seen = status.status
        return await self.tasks.get(task.id, context)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """The task now, then its events as its run goes on: followed here whichever process drives it."""
        validate_proto_required_fields(params)
        task = await self.tasks.get(params.id, context)
        if task is None:
            raise TaskNotFoundError(message=f"no task {params.id}")
        if task.status.state in ENDED:
            raise UnsupportedOperationError(
                message=f"task {params.id} has ended ({state_name(task.status.state)}); GetTask reads it"
            )
        yield task
        async for event in follow(self.views, self.tasks, task.id, context, task.context_id, task.status):
            yield event
