"""What an A2A message asks of the engine: `RunOfMessage`, the a2a-sdk's `RequestContextBuilder`.

It turns a message into ONE engine call before the sdk makes or touches a task: a message naming no task
starts a run (`submit`; the task id IS the run id, which is why the run is made here and not in the
executor: the sdk fixes the task id before it executes), and one naming a task gives its waiting run the
input (`give_input`), bound to the message's id (I18): the same message again changes nothing and gets
the task as it is now (`SentBefore`). A refused message raises the protocol's error naming the field;
nothing is stored. The A2A server that serves it is `entries/a2a_tasks.py`.
"""

from __future__ import annotations

import hashlib
import uuid

from a2a.helpers.proto_helpers import get_message_text
from a2a.server.agent_execution import RequestContext, RequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.types.a2a_pb2 import Message, SendMessageRequest, Task, TaskState, TaskStatus
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from ticketiq.auth import tokens
from ticketiq.auth.tokens import Principal
from ticketiq.engine import run_keys
from ticketiq.engine.engine import Engine
from ticketiq.engine.questions import Verdict, by_message
from ticketiq.engine.seal import canonical
from ticketiq.errors import NotFound, RequestError, TicketIQError
from ticketiq.storage.task_store import RunTaskStore, as_json, caller_of

# Where the A2A entry point puts the token's principal in the sdk's call context state.
PRINCIPAL = "ticketiq.principal"
# The run a message made, left queued for its follower to start (`RunFollower.execute`): started here, a
# run that ended at once (its agent quarantined) could end before the sdk's producer looks at the task, which
# then refuses a task already ended instead of following it to that end.
STARTS = "ticketiq.starts"
ENDED = frozenset({TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                   TaskState.TASK_STATE_REJECTED})  # fmt: skip
MAX_INPUT = 100_000  # characters, as POST /v1/runs takes
MAX_MESSAGE_ID = 200  # it becomes part of the run's key, or of what an input records as its answer (I18)
QUESTION_FIELD = "params.message.metadata.question_id"


def state_name(state: int) -> str:
    return str(TaskState.Name(state)).removeprefix("TASK_STATE_").lower().replace("_", "-")


def _params_error(field: str, message: str) -> InvalidParamsError:
    return InvalidParamsError(message=f"{field}: {message}", data={"field": field})


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
            context.state[STARTS] = created.id
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
                message=f"task {task_id} has ended ({state_name(state)}); send a message without taskId to start "
                "another"
            )
        waits = get_message_text(task.status.message) if task.status.HasField("message") else ""
        raise _params_error(
            "params.message.taskId", f"task {task_id} is not waiting for input ({state_name(state)}"
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
        raise _untaken(message) or _params_error(
            "params.message.parts", "the message holds no text; send the request as a text part"
        )
    if len(text) > MAX_INPUT:
        raise _params_error("params.message.parts", f"the text is longer than {MAX_INPUT} characters")
    return text


def _untaken(message: Message) -> ContentTypeNotSupportedError | None:
    """A message with no text but a part of another kind (a file, a URL, data): the protocol's error for a
    media type the agent does not take (-32005), naming the part; the card's input mode is text/plain."""
    for number, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind is not None and kind != "text":
            field = f"params.message.parts.{number}"
            said = f"a {kind} part" + (f" ({part.media_type[:100]})" if part.media_type else "")
            return ContentTypeNotSupportedError(
                message=f"{field}: {said} is not taken; send the request as a text part (text/plain)",
                data={"field": field},
            )
    return None


def _refused(exc: RequestError) -> A2AError:
    """The engine's refusal of a message, named as the protocol names the field."""
    if exc.field == "header.Idempotency-Key":
        return _params_error("params.message.messageId", f"{exc.message} (a message id is its Idempotency-Key)")
    if exc.field == "body.agent":
        return _params_error("params.message.metadata.agent", exc.message)
    return _params_error("params.message", exc.message)
