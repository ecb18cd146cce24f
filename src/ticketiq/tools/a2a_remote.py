"""A remote A2A agent (protocol 1.0) through the a2a-sdk's client: SendMessage, then GetTask until it ends.

The message goes out non-blocking (`return_immediately`), its message id our key: a remote that dedupes
on message ids would keep one message for a repeat, though A2A defines no dedupe and the engine never
sends such a call again (I9). The task id in the agent's first answer is recorded at once through
`ctx.on_reference`; from then on a resume reads the call back by GetTask (the reader), and a call left
in doubt before it is reported unknown. The answer is the completed task's text artifacts; a failed,
canceled or rejected task is the call's error.

The sdk sends its requests through the shared client, wrapped for the one call (`_CallHttp`): each
request is checked against the lease at its last moment (I3) and fits the write's window (I14), as
`tools.http.request` makes every other adapter's requests. The protocol header the sdk needs rides on
these requests only: given a client, the sdk's ClientFactory writes it into that client's defaults.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import httpx
from a2a.client import A2ACardResolver, A2AClientError, Client, ClientCallContext, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotFoundError

from ticketiq.settings import Settings
from ticketiq.tools.base import CallContext, Outcome, ReadBack, Tool, ToolClass
from ticketiq.tools.http import VendorFailed, checked_at_write

VENDOR = "remote agent"
T = TypeVar("T")

_FAILED = {
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_CANCELED: "was canceled",
    TaskState.TASK_STATE_REJECTED: "refused it",
}
# Interrupted: the task waits for the sender, which this tool never answers; as good as ended.
_WAITS_FOR_US = {
    TaskState.TASK_STATE_INPUT_REQUIRED: "asks for more input",
    TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authorization",
}
_FIRST_POLL_S = 0.05
_LONGEST_POLL_S = 1.0


def tools(settings: Settings) -> list[Tool]:
    return [
        Tool(
            "ask_remote_agent",
            "Ask the remote operations agent (over A2A) a question in plain text; it answers in text, "
            "which may take a while.",
            {
                "type": "object",
                "properties": {"text": {"type": "string", "minLength": 1, "maxLength": 16000}},
                "required": ["text"],
                "additionalProperties": False,
            },
            ToolClass.REMOTE_AGENT,
            ask,
            reader=read_task,
            vendor=VENDOR,
        )
    ]


async def ask(ctx: CallContext) -> Outcome:
    agent = await RemoteAgent.connect(ctx)
    request = SendMessageRequest(
        message=Message(message_id=ctx.key, role=Role.ROLE_USER, parts=[Part(text=ctx.args["text"])]),
        configuration=SendMessageConfiguration(return_immediately=True),
    )
    answered = await agent.send(request)
    if answered.HasField("message"):  # the agent answered at once, without a task
        return Outcome(ok=True, result={"answer": get_message_text(answered.message)})
    task = answered.task
    if not task.id:
        raise ValueError("the agent's answer names no task")  # sent, answered oddly: uncertain
    if ctx.on_reference is not None:
        await ctx.on_reference(task.id)  # I9: from now on the call can be read back by it
    # The message is sent and its task known: what follows are reads (GetTask), which the write's
    # window does not bound (I14 bounds sends). They go on while the lease holds (each is checked
    # against it at its last moment), up to TICKETIQ_REMOTE_AGENT_WAIT_S.
    following = RemoteAgent(
        dataclasses.replace(ctx, window=None), agent.client, time.monotonic() + ctx.settings.remote_agent_wait_s
    )
    waited = await following.wait(task)
    if waited is None:
        error = f"{VENDOR}: task {task.id} is no longer known to the agent; the message was not sent again"
        return Outcome(ok=False, error=error)
    return outcome_of(waited) or Outcome(
        ok=False,
        error=f"{VENDOR}: task {task.id} was still {_state(waited)} when the call's time ran out; "
        "the message was not sent again",
    )


async def read_task(ctx: CallContext) -> ReadBack:
    """GetTask by the recorded task id, waiting while the task works (up to TICKETIQ_REMOTE_AGENT_WAIT_S):
    ended: found, with its outcome; unknown to the agent: not found; still working: cannot tell."""
    if ctx.reference is None:
        return ReadBack(found=None)
    agent = await RemoteAgent.connect(ctx, ends=time.monotonic() + ctx.settings.remote_agent_wait_s)
    task = await agent.get(ctx.reference)
    if task is None:
        return ReadBack(found=False)
    waited = await agent.wait(task)
    outcome = None if waited is None else outcome_of(waited)
    return ReadBack(found=None) if outcome is None else ReadBack(found=True, outcome=outcome)


def outcome_of(task: Task) -> Outcome | None:
    """What an ended task came to; None while it goes on."""
    state = task.status.state
    if state == TaskState.TASK_STATE_COMPLETED:
        texts = [text for artifact in task.artifacts if (text := get_artifact_text(artifact))]
        if not texts and task.status.HasField("message"):
            texts = [get_message_text(task.status.message)]
        return Outcome(ok=True, result={"answer": "\n".join(texts), "task_id": task.id})
    why = _FAILED.get(state) or _WAITS_FOR_US.get(state)
    if why is None:
        return None
    said = get_message_text(task.status.message) if task.status.HasField("message") else ""
    return Outcome(ok=False, error=f"{VENDOR}: task {task.id} {why}" + (f": {said}" if said else ""))


class RemoteAgent:
    """The sdk's client for one call, its requests bounded by the call's window (a write) or by `ends`
    (a reader), whichever closes first."""

    def __init__(self, ctx: CallContext, client: Client, ends: float | None) -> None:
        self.ctx = ctx
        self.client = client
        self.ends = ends

    @classmethod
    async def connect(cls, ctx: CallContext, ends: float | None = None) -> RemoteAgent:
        http = cast(httpx.AsyncClient, _CallHttp(ctx))  # the sdk uses only what _CallHttp offers
        resolver = A2ACardResolver(http, ctx.settings.remote_agent_url)
        bounds = _Bounds(ctx, ends)
        card = await bounds.call(
            "its card", lambda context: resolver.get_agent_card(http_kwargs={"timeout": context.timeout}), sent=False
        )
        try:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)
        except ValueError as exc:  # no transport of its card is one the sdk speaks: nothing was sent
            raise _failed(f"{VENDOR}: its card offers no transport the client speaks ({exc})", False) from exc
        return cls(ctx, client, ends)

    async def send(self, request: SendMessageRequest) -> StreamResponse:
        """SendMessage; the agent's one answer: a task or a message."""

        async def sent(context: ClientCallContext) -> list[StreamResponse]:
            return [answer async for answer in self.client.send_message(request, context=context)]

        answers = await _Bounds(self.ctx, self.ends).call("the message", sent, sent=True)
        return answers[0]

    async def get(self, task_id: str) -> Task | None:
        """GetTask; None when the agent knows no such task."""

        async def got(context: ClientCallContext) -> Task | None:
            try:
                return await self.client.get_task(GetTaskRequest(id=task_id), context=context)
            except TaskNotFoundError:
                return None

        return await _Bounds(self.ctx, self.ends).call(f"task {task_id}", got, sent=False)

    async def wait(self, task: Task) -> Task | None:
        """Poll GetTask while the task goes on, until it ends or the bounds close: the task as last seen
        (None: the agent no longer knows it). A try that fails is tried again at the next poll."""
        bounds = _Bounds(self.ctx, self.ends)
        delay = _FIRST_POLL_S
        failed: VendorFailed | None = None
        while outcome_of(task) is None:
            if not bounds.open_for(delay):
                if failed is not None:
                    raise failed
                return task
            await asyncio.sleep(delay)
            delay = min(delay * 2, _LONGEST_POLL_S)
            try:
                seen = await self.get(task.id)
            except VendorFailed as exc:
                failed = exc
                continue
            if seen is None:
                return None
            task, failed = seen, None
        return task


class _Bounds:
    """Each request's time: one request bound, cut to the write's window (I14) or to the reader's end."""

    def __init__(self, ctx: CallContext, ends: float | None) -> None:
        self.ctx = ctx
        self.ends = ends

    def open_for(self, seconds: float) -> bool:
        """Whether a request may still start `seconds` from now."""
        later = time.monotonic() + seconds
        window = self.ctx.window
        if window is not None and not window.may_send(later):
            return False
        return self.ends is None or later < self.ends

    async def call(self, what: str, request: Callable[[ClientCallContext], Awaitable[T]], *, sent: bool) -> T:
        """One request through the sdk. `sent`: whether it is the message, which the agent may have taken
        when it fails after it went out; a failure of any other request leaves nothing in doubt."""
        now = time.monotonic()
        timeout = self.ctx.settings.http_timeout_s
        if self.ctx.window is not None:
            if not self.ctx.window.may_send(now):
                raise _failed(f"{VENDOR}: the call's time was spent before {what} could be asked for", False)
            timeout = self.ctx.window.try_timeout(now, timeout)
        if self.ends is not None:
            timeout = min(timeout, self.ends - now)
            if timeout <= 0:
                raise _failed(f"{VENDOR}: no time was left to ask for {what}", False)
        self.ctx.before_send()
        try:
            async with asyncio.timeout(timeout):  # the whole try, not only each phase of it
                return await request(ClientCallContext(timeout=timeout))
        except TimeoutError as exc:
            raise _failed(f"{VENDOR} did not answer about {what} in time", sent) from exc
        except A2AClientError as exc:
            # The transport failed: a connection never made reached nobody; a 4xx was refused; anything
            # else (a 5xx, a dropped connection, a timeout) may have come after the agent took it.
            cause = exc.__cause__
            status = cause.response.status_code if isinstance(cause, httpx.HTTPStatusError) else None
            unreached = isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
            refused = status is not None and status < 500
            raise _failed(f"{VENDOR} failed on {what}: {exc}", sent and not unreached and not refused) from exc
        except A2AError as exc:
            # The agent answered with a protocol error: it refused the request, nothing was taken.
            raise _failed(f"{VENDOR} refused {what}: {type(exc).__name__}: {exc}", False) from exc


class _CallHttp:
    """The shared client as the sdk's card resolver and JSON-RPC transport use it (headers, is_closed,
    build_request, send, get), for one call: the lease is checked at the last moment before each
    request's bytes go out (I3), and the sdk's protocol header stays on this call's requests."""

    def __init__(self, ctx: CallContext) -> None:
        self._ctx = ctx
        self.headers = httpx.Headers()  # the sdk's ClientFactory sets its A2A-Version here

    @property
    def is_closed(self) -> bool:
        return self._ctx.http.is_closed

    def build_request(self, method: str, url: str, **kwargs: Any) -> httpx.Request:
        headers = httpx.Headers(self.headers)
        headers.update(kwargs.pop("headers", None) or {})
        # The lease only: the same client asks for the card, sends the message and then follows the task, and
        # the follow-up reads may go on past the message's window (REMOTE_AGENT_WAIT_S); `_Bounds` holds the
        # message itself to its window before it is asked for.
        extensions = checked_at_write(self._ctx.before_send)
        return self._ctx.http.build_request(method, url, headers=headers, extensions=extensions, **kwargs)

    async def send(self, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
        return await self._ctx.http.send(request, stream=stream)

    async def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return await self.send(self.build_request("GET", url, **kwargs))


def _failed(error: str, uncertain: bool) -> VendorFailed:
    return VendorFailed(Outcome(ok=False, error=error, uncertain=uncertain))


def _state(task: Task) -> str:
    return str(TaskState.Name(task.status.state)).removeprefix("TASK_STATE_").lower().replace("_", " ")
