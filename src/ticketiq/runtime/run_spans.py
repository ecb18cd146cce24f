"""The spans of one attempt of a run: the attempt, each step, each model call and each tool call.

Made only while tracing is on (`runtime/tracing.py`); the driver asks `tracing.ON` before it makes an
`AttemptTrace`, so a process without a collector makes none of this. The names and attributes follow
OpenTelemetry's GenAI conventions where they have one: `invoke_agent <agent>` for the attempt,
`chat <model>` for a model call (`gen_ai.*`: the operation, the system, the model, the token usage) and
`execute_tool <tool>` for a tool call (its name and call id, with our own `ticketiq.tool.class` and
`ticketiq.step.key`; never its arguments, which may hold what a vendor must not see twice in a log).
A step is `step <n>`. Every span carries `ticketiq.run.id`, `ticketiq.run.attempt` and the process.

Span ids come from the run, the attempt and what the span is (`tracing.span_id`): the attempt's from
(run, attempt), a step's from (run, attempt, step n), a model call's from the step it starts, a tool
call's from its key. A resuming process that writes the spans a killed one never sent writes these same
ids (`lost_spans.py`), so a span the killed one did send is the same span, not a second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from ticketiq.runtime import tracing


class Usage(Protocol):
    """A model's reply as far as its span tells it: the tokens it used."""

    @property
    def prompt_tokens(self) -> int: ...
    @property
    def completion_tokens(self) -> int: ...


Reply = TypeVar("Reply", bound=Usage)

ENDED_WELL = frozenset({"succeeded", "waiting", "answered", "handed_over"})


class AttemptTrace:
    """One attempt's spans, on the process driving it."""

    __slots__ = ("attempt", "common", "run_id", "span", "trace_id")

    def __init__(self, run_id: str, attempt: int, agent: str, traceparent: str | None, process: str) -> None:
        self.run_id = run_id
        self.attempt = attempt
        self.trace_id = tracing.run_trace_id(run_id, traceparent)
        self.common: dict[str, Any] = {tracing.RUN_ID: run_id, tracing.RUN_ATTEMPT: attempt, tracing.PROCESS: process}
        self.span = self._start(
            f"invoke_agent {agent}", ("attempt", attempt), tracing.run_parent(run_id, traceparent),
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent},
        )  # fmt: skip

    def _start(self, name: str, what: tuple[object, ...], parent: Any, attributes: dict[str, Any],
               kind: SpanKind = SpanKind.INTERNAL) -> Span:  # fmt: skip
        return tracing.named_span(self.trace_id, tracing.span_id(self.run_id, *what), name, parent,
                                  {**self.common, **attributes}, kind)  # fmt: skip

    def step(self, n: int) -> Span:
        """The span of step `n` (its model call and its tool calls), under the attempt."""
        return self._start(f"step {n}", ("step", self.attempt, n), trace.set_span_in_context(self.span),
                           {"ticketiq.step": n})  # fmt: skip

    def chat(self, step: Span, n: int, model: str) -> Span:
        """A model call, under its step; made current while it is sent, so the request carries it."""
        return self._start(
            f"chat {model}", ("chat", self.attempt, n), trace.set_span_in_context(step),
            {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.provider.name": "openai",
             "gen_ai.request.model": model, "ticketiq.step": n},
            SpanKind.CLIENT,
        )  # fmt: skip

    async def chatting(self, step: Span, n: int, model: str, ask: Callable[[], Awaitable[Reply]]) -> Reply:
        """`ask` the model inside its call's span, current while it is sent (the request carries it)."""
        span = self.chat(step, n, model)
        token = current(span)
        try:
            reply = await ask()
        except BaseException as exc:
            failed(span, str(exc))
            raise
        finally:
            detach(token)
        chatted(span, reply.prompt_tokens, reply.completion_tokens)
        return reply

    def tool(self, parent: Span | None, n: int, tool: str, tool_class: str, call_id: str, key: str) -> Span:
        """A tool call, under its step (or the attempt, for calls carried over from a lost one)."""
        return self._start(
            f"execute_tool {tool}", ("call", self.attempt, key), trace.set_span_in_context(parent or self.span),
            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool, "gen_ai.tool.call.id": call_id,
             "ticketiq.tool.class": tool_class, "ticketiq.step.key": key, "ticketiq.step": n},
            SpanKind.CLIENT,
        )  # fmt: skip

    def end(self, status: str) -> None:
        self.span.set_attribute("ticketiq.run.ended_as", status)
        if status not in ENDED_WELL:
            self.span.set_status(Status(StatusCode.ERROR, status))
        self.span.end()


def chatted(span: Span, prompt_tokens: int, completion_tokens: int, model: str | None = None) -> None:
    span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", completion_tokens)
    if model:
        span.set_attribute("gen_ai.response.model", model)
    span.end()


def failed(span: Span, why: str) -> None:
    span.set_status(Status(StatusCode.ERROR, why[:500]))
    span.end()


def current(span: Span) -> object:
    """Make `span` the current one (outgoing requests carry it); `otel_context.detach` the token after."""
    return otel_context.attach(trace.set_span_in_context(span))


def detach(token: object) -> None:
    otel_context.detach(token)  # type: ignore[arg-type]
