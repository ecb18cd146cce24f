"""A2A tasks follow runs: what a message asks of the engine, and how a task shows its run.

The sdk's `DefaultRequestHandlerV2` serves the protocol; three of its extension points are ours:

- `RunOfMessage` (its `RequestContextBuilder`) turns a message into ONE engine call before the sdk makes
  or touches a task: a message naming no task starts a run (`submit`; the task id IS the run id, which
  is why the run is made here and not in the executor: the sdk fixes the task id before it executes),
  and one naming a task gives its waiting run the input (`give_input`), bound to the message's id
  (I18): the same message again changes nothing and gets the task as it is now. A refused message
  raises the protocol's error naming the field; nothing is stored.
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
import hashlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator

from a2a.helpers.proto_helpers import get_message_text
from a2a.server.agent_execution import AgentExecutor, RequestContext, RequestContextBuilder
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
    A2AError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.proto_utils import validate_proto_required_fields
from a2a.utils.task import apply_history_length

from ticketiq.engine import run_keys, tokens
from ticketiq.engine.engine import TERMINAL, Engine
from ticketiq.engine.questions import Verdict, by_message
from ticketiq.engine.seal import canonical
from ticketiq.engine.tokens import Permission, Principal
from ticketiq.errors import NotFound, RequestError, TicketIQError
from ticketiq.storage.rows import Waiting
from ticketiq.storage.task_store import RunTaskStore, Waits, as_json, caller_of

# Where the A2A entry point puts the token's principal in the sdk's call context state.
PRINCIPAL = "ticketiq.principal"

ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                   TaskState.TASK_STATE_REJECTED})  # fmt: skip
WAITS_FOR_CLIENT = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})
MAX_INPUT = 100_000  # characters, as POST /v1/runs takes
MAX_MESSAGE_ID = 200  # it becomes part of the run's key, or of what an input records as its answer (I18)
QUESTION_FIELD = "params.message.metadata.question_id"
# A follower wakes on the run's status change (LISTEN/NOTIFY); this bounds a wait all the same.
FOLLOW_S = 5.0
# CancelTask waits this long for a running run to reach its next gate check and end.
CANCEL_WAIT_S = 5.0
# A task parked waiting for its client is let go from memory after this; a later message finds it
# again in the store.
PARKED_S = 300.0


def _state(state: int) -> str:
    return str(TaskState.Name(state)).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _params_error(field: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message=f"{field}: {message}", data={"field": field})


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


class SentBefore(TicketIQError):
    """A message sent again whose first send was taken: one that started a task now ended, or an answer
    its run took already (I18). The answer is the task as it is now. Raised before the sdk makes or
    wakes a task of it (it would refuse to run an ended task again, or follow the run as for a new
    answer), so nothing is run, stored or followed again."""

    def __init__(self, task: Task, why: str) -> None:
        super().__init__(f"message sent again; {why}")
        self.task = task


class RunOfMessage(RequestContextBuilder):
    """Which run a message is for: a new one (`submit`) or the waiting one it answers (`give_input`)."""

    def __init__(self, engine: Engine, tasks: RunTaskStore, default_agent: str) -> None:
        self.engine = engine
        self.tasks = tasks
        self.default_agent = default_agent

    async def build(
        self,
        context: ServerCallContext,
        params: SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: Task | None = None,
    ) -> RequestContext:
        if params is not None:
            text = _text(params.message)
            if task_id:
                context_id = await self._answer(task_id, params.message, text, context, context_id)
            else:
                task_id, context_id = await self._start(params.message, text, context, context_id)
        return RequestContext(call_context=context, request=params, task_id=task_id, context_id=context_id, task=task)

    async def _start(
        self, message: Message, text: str, context: ServerCallContext, context_id: str | None
    ) -> tuple[str, str | None]:
        principal: Principal = context.state[PRINCIPAL]
        agent = self._agent(message)
        refusal = tokens.start_refusal(principal, agent)
        if refusal is not None:
            raise _params_error("params.message.metadata.agent", refusal)
        if len(message.message_id) > MAX_MESSAGE_ID:
            raise _params_error("params.message.messageId", f"at most {MAX_MESSAGE_ID} characters")
        # The content, not its addressing: the same message sent again may carry the context it was given.
        content = {k: v for k, v in as_json(message).items() if k not in ("taskId", "contextId")}
        try:
            created = await self.engine.submit(
                agent, text, channel="a2a", idempotency_key=run_keys.a2a(principal.name, message.message_id),
                request_hash=hashlib.sha256(canonical(content)).hexdigest(), actor=principal.name, start=False,
            )  # fmt: skip
        except RequestError as exc:
            raise _refused(exc) from None
        # A message naming no context starts one of its run's own: the same message sent again while
        # its first send still runs then joins that send's task in the same context.
        context_id = context_id or str(uuid.uuid5(uuid.UUID(created.id), "context"))
        if created.created:
            # The task's row before its run starts: a process that dies from here on leaves a task any
            # process can answer for (a run left queued is started by the leader's sweep).
            first = Message()
            first.CopyFrom(message)
            first.task_id, first.context_id = created.id, context_id
            submitted = Task(id=created.id, context_id=context_id, history=[first],
                             status=TaskStatus(state=TaskState.TASK_STATE_SUBMITTED))  # fmt: skip
            await self.tasks.save(submitted, context)
            await self.engine.start(created.id)
            return created.id, context_id
        # The same message again: its task, in the context it was started in.
        existing = await self.tasks.get(created.id, context)
        if existing is None:
            return created.id, context_id  # its first send has not saved the task yet
        if message.context_id and message.context_id != existing.context_id:
            raise _params_error(
                "params.message.contextId", f"message {message.message_id} started task {created.id} in context "
                f"{existing.context_id}, not {message.context_id}",
            )  # fmt: skip
        if existing.status.state in ENDED:
            raise SentBefore(existing, f"its task {existing.id} has ended")
        return created.id, existing.context_id

    def _agent(self, message: Message) -> str:
        named = as_json(message.metadata).get("agent") if message.HasField("metadata") else None
        if named is None:
            return self.default_agent
        if not isinstance(named, str) or self.engine.deps.catalog.get(named) is None:
            known = ", ".join(sorted(self.engine.deps.catalog.agents))
            raise _params_error("params.message.metadata.agent", f"no agent named {named!r}; the agents: {known}")
        return named

    async def _answer(
        self, task_id: str, message: Message, text: str, context: ServerCallContext, context_id: str | None
    ) -> str:
        """Give the task's waiting run this input, bound to the message (I18); the task's context id. The
        same message again (its first send cut before its answer came back) raises `SentBefore` with the
        task as it is now, whatever the run asked or did since: it never answers the next question. A
        message naming its question (`metadata.question_id`, as the input-required status lists them)
        answers exactly that one, so a late message meant for an answered question answers no other."""
        message_id = message.message_id
        task = await self.tasks.get(task_id, context)
        if task is None:
            raise TaskNotFoundError(message=f"no task {task_id}")
        if len(message_id) > MAX_MESSAGE_ID:
            raise _params_error("params.message.messageId", f"at most {MAX_MESSAGE_ID} characters")
        question_id = _question_named(message)
        caller = caller_of(context)
        try:
            answered = await self.engine.give_input(
                task.id, by_message(text, caller.name, message_id, question_id), caller.scope
            )
        except NotFound:
            raise TaskNotFoundError(message=f"no task {task_id}") from None
        if answered.verdict is Verdict.NO_QUESTION:
            raise _params_error(QUESTION_FIELD, f"task {task_id} asked no question {question_id}; its "
                                "input-required status lists the questions it waits for")  # fmt: skip
        if answered.verdict is Verdict.TAKEN:
            raise _params_error(QUESTION_FIELD, f"question {question_id} of task {task_id} was answered already "
                                "by another message; a question is answered once")  # fmt: skip
        if answered.verdict is Verdict.GIVEN:
            return context_id or task.context_id
        if answered.verdict is Verdict.REPEATED:
            now = await self.tasks.get(task.id, context)
            raise SentBefore(now or task, f"message {message_id} answered a question of task {task.id} already")
        if answered.verdict is Verdict.REUSED:
            raise _params_error("params.message.messageId", f"message {message_id} answered a question of task "
                                f"{task_id} already, with other text; send a new message with an id of its "
                                "own")  # fmt: skip
        state = task.status.state
        if state in ENDED:
            raise UnsupportedOperationError(
                message=f"task {task_id} has ended ({_state(state)}); send a message without taskId to start another"
            )
        waits = get_message_text(task.status.message) if task.status.HasField("message") else ""
        raise _params_error(
            "params.message.taskId", f"task {task_id} is not waiting for input ({_state(state)}"
            + (f": {waits}" if waits else "") + "); a message naming a task answers a question its run asked",
        )  # fmt: skip


def _question_named(message: Message) -> str | None:
    """The question an answering message names (`metadata.question_id`), checked; None when it names none."""
    named = as_json(message.metadata).get("question_id") if message.HasField("metadata") else None
    if named is None:
        return None
    try:
        return str(uuid.UUID(named))
    except (TypeError, ValueError, AttributeError):
        raise _params_error(QUESTION_FIELD, f"{named!r} is no question id: name one the input-required status "
                            "lists") from None  # fmt: skip


def _text(message: Message) -> str:
    text = get_message_text(message)
    if not text.strip():
        raise _params_error("params.message.parts", "the message holds no text; send the request as a text part")
    if len(text) > MAX_INPUT:
        raise _params_error("params.message.parts", f"the text is longer than {MAX_INPUT} characters")
    return text


def _refused(exc: RequestError) -> A2AError:
    """The engine's refusal of a message, named as the protocol names the field."""
    if exc.field == "header.Idempotency-Key":
        return _params_error("params.message.messageId", f"{exc.message} (a message id is its Idempotency-Key)")
    if exc.field == "body.agent":
        return _params_error("params.message.metadata.agent", exc.message)
    return _params_error("params.message", exc.message)


class RunFollower(AgentExecutor):
    """Follows a message's run (made or woken by `RunOfMessage`) and emits its task's events."""

    def __init__(self, engine: Engine, tasks: RunTaskStore) -> None:
        self.engine = engine
        self.tasks = tasks

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        run_id, context_id = context.task_id, context.context_id
        assert run_id and context_id, "RunOfMessage sets both"
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
        async for event in follow(self.engine, self.tasks, run_id, context.call_context, context_id, after):
            await event_queue.enqueue_event(event)

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        # RunRequestHandler serves CancelTask itself; should the sdk reach this, it is the same Stop.
        assert context.task_id
        _may_stop(context.call_context)
        await self.engine.request_stop(context.task_id, caller_of(context.call_context).name)


async def follow(
    engine: Engine,
    tasks: RunTaskStore,
    run_id: str,
    call: ServerCallContext,
    context_id: str,
    after: TaskStatus | None = None,
) -> AsyncIterator[TaskStatusUpdateEvent | TaskArtifactUpdateEvent]:
    """The task's events from its status `after` on (None: from its status now), until it ends or waits
    for its client. Woken by the run's status changes, wherever the run is driven."""
    run = await engine.get_run(run_id)
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
        changed = await engine.wait_change(run_id, FOLLOW_S, seen)
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

    def __init__(self, engine: Engine, tasks: RunTaskStore, card: AgentCard, default_agent: str) -> None:
        super().__init__(
            agent_executor=RunFollower(engine, tasks),
            task_store=tasks,
            agent_card=card,
            request_context_builder=RunOfMessage(engine, tasks, default_agent),
            interrupted_task_timeout=PARKED_S,
        )
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
            raise TaskNotCancelableError(message=f"task {params.id} has ended ({_state(task.status.state)})")
        try:
            await self.engine.request_stop(task.id, caller_of(context).name)
        except NotFound:
            raise TaskNotFoundError(message=f"no task {params.id}") from None
        # A queued or waiting run ends at once; a running one at its next gate check.
        deadline = time.monotonic() + CANCEL_WAIT_S
        seen = None
        while (left := deadline - time.monotonic()) > 0:
            status = await self.engine.wait_change(task.id, left, seen)
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
                message=f"task {params.id} has ended ({_state(task.status.state)}); GetTask reads it"
            )
        yield task
        async for event in follow(self.engine, self.tasks, task.id, context, task.context_id, task.status):
            yield event
