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
ids, so a span the killed one did send is the same span, not a second.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, NonRecordingSpan, Span, SpanContext, SpanKind, Status, StatusCode

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
        token = tracing.named_ids(self.trace_id, tracing.span_id(self.run_id, *what))
        try:
            return tracing.tracer().start_span(
                name, context=parent, kind=kind, attributes={**self.common, **attributes}
            )
        finally:
            tracing.unnamed(token)

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


# ----- the spans a killed process never sent, written by the process that took its run over -------------


@dataclass(frozen=True)
class LostAttempt:
    """What the write-ahead record says of an attempt that was lost: its process, when it began and when
    its loss was found (the take), on the database clock."""

    attempt: int
    process: str
    started_at: datetime
    lost_at: datetime
    ended: str  # lost, or stalled (its process lived on but let the lease lapse)


@dataclass(frozen=True)
class CallInFlight:
    """A call of the lost attempt's last step, as the record holds it, and what the takeover made of it."""

    idx: int
    tool: str
    tool_class: str
    key: str
    status: str  # in_doubt (a write marked before it was sent), pending, or in_flight (a read: no mark)
    marked_at: datetime | None
    happened: str  # settlement.Happened's value: what the takeover did with it


class AttemptRecord(Protocol):
    """An attempt as the record holds it (storage's `AttemptRow`)."""

    @property
    def attempt(self) -> int: ...
    @property
    def process(self) -> str: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def first_at(self) -> datetime | None: ...
    @property
    def ended_at(self) -> datetime | None: ...
    @property
    def ended(self) -> str | None: ...


def lost_attempt(attempts: Sequence[AttemptRecord], taking: int) -> LostAttempt | None:
    """The attempt `taking` took the run over from, when it was lost (or stalled); None when it was not
    (handed back: its process ended its own spans)."""
    before = [a for a in attempts if a.attempt < taking]
    if not before:
        return None
    last = before[-1]
    if last.ended not in ("lost", "stalled") or last.ended_at is None:
        return None
    return LostAttempt(last.attempt, last.process, last.started_at, last.ended_at, last.ended)


class PlannedCallLike(Protocol):
    """A call the lost step planned (the engine's `PlannedCall`)."""

    @property
    def idx(self) -> int: ...
    @property
    def tool(self) -> str: ...
    @property
    def step_key(self) -> str | None: ...
    @property
    def tool_class(self) -> Any: ...  # its `.value` names the class


@dataclass(frozen=True)
class Record:
    """What the write-ahead record says of the run, as a takeover reads it (storage's timeline rows)."""

    attempts: Sequence[AttemptRecord]
    notes: Sequence[dict[str, Any]]  # the model steps' notes (`model_step`, `model_answer`)
    marked: dict[tuple[int, int], datetime | None]  # (step, idx) -> when the call was marked in doubt
    # (step, idx) -> when the call went out and when its outcome came back (datetimes, or epoch seconds of
    # the process's clock for a finished call still riding in the checkpoint)
    times: dict[tuple[int, int], tuple[Any, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class LostChat:
    """The lost step's model call, as its note recorded it: it answered; its span was never sent."""

    model: str
    started_at: float  # epoch seconds, the asking process's clock
    model_ms: float
    tokens: int


def write_takeover(
    taker: AttemptTrace,
    record: Record,
    agent: str,
    model: str,
    traceparent: str | None,
    step: int,
    in_flight: Sequence[tuple[PlannedCallLike, str, str]],
    handing_on: bool,
) -> None:
    """The spans of the attempt `taker` took the run over from, when it was lost (`write_lost`); `step`: the
    checkpointed step; `in_flight`: each call it left (the call, its status, what the takeover made of it)."""
    lost = lost_attempt(record.attempts, taker.attempt)
    if lost is None:
        return  # handed back, not lost: its process ended its spans itself
    model_step = not in_flight and not handing_on
    calls = [CallInFlight(c.idx, c.tool, c.tool_class.value, c.step_key or f"{step}/{c.idx}", status,
                          record.marked.get((step, c.idx)), happened) for c, status, happened in in_flight]  # fmt: skip
    note = next((n["body"] for n in record.notes if n.get("kind") == "model_step" and n["body"].get("step") == step
                 and n["body"].get("attempt") == lost.attempt and "started_at" in n["body"]), None)  # fmt: skip
    chat = None if note is None or model_step or handing_on else LostChat(
        model, float(note["started_at"]), float(note.get("model_ms", 0.0)), int(note.get("tokens", 0)))  # fmt: skip
    in_step = None if handing_on else step + (1 if model_step else 0)
    done = sorted((n["body"] for n in record.notes if n.get("kind") in ("model_step", "model_answer")
                   and n["body"].get("attempt") == lost.attempt and "started_at" in n["body"]
                   and (in_step is None or int(n["body"].get("step", 0)) < in_step)),
                  key=lambda body: int(body.get("step", 0)))  # fmt: skip
    # The step in flight began when the one before it was done: its model call's end, or its last call's.
    ends = [int(float(n["started_at"]) * 1e9 + float(n.get("model_ms", 0.0)) * 1e6) for n in done[-1:]]
    ends += [t for n in done[-1:] for i in range(len(n.get("calls") or []))
             if (t := _at(record.times.get((int(n.get("step", 0)), i), (None, None))[1])) is not None]  # fmt: skip
    began = max(ends) if ends else None
    write_lost(taker, lost, agent, traceparent, in_step, calls, model_step, chat, began)
    write_finished(taker, lost, model, done, record, began)


def _at(value: Any) -> int | None:
    """A time as the record holds it (a datetime, or epoch seconds) in nanoseconds; None when unknown."""
    if isinstance(value, datetime):
        return _ns(value)
    if isinstance(value, int | float):
        return int(value * 1_000_000_000)
    return None


def write_finished(taker: AttemptTrace, lost: LostAttempt, model: str, notes: Sequence[dict[str, Any]],
                   record: Record, in_flight_began: int | None) -> None:  # fmt: skip
    """The lost attempt's finished steps, from their notes: its process sent them (the same ids: a backend
    keeps one), unless it died with them still in its batch, which is why they are written again here."""
    run_id, trace_id = taker.run_id, taker.trace_id
    common: dict[str, Any] = {tracing.RUN_ID: run_id, tracing.RUN_ATTEMPT: lost.attempt,
                              tracing.PROCESS: lost.process}  # fmt: skip
    parent = trace.set_span_in_context(NonRecordingSpan(SpanContext(
        trace_id, tracing.span_id(run_id, "attempt", lost.attempt), True, tracing.sampled_flags())))  # fmt: skip
    starts = [int(float(n["started_at"]) * 1_000_000_000) for n in notes]
    starts.append(in_flight_began if in_flight_began is not None else _ns(lost.lost_at))
    for i, note in enumerate(notes):
        n = int(note.get("step", 0))
        began, until = starts[i], starts[i + 1]

        def span(name: str, what: tuple[object, ...], under: Any, attributes: dict[str, Any], start: int,
                 end: int, kind: SpanKind = SpanKind.INTERNAL) -> Span:  # fmt: skip
            token = tracing.named_ids(trace_id, tracing.span_id(run_id, *what))
            try:
                made = tracing.tracer().start_span(name, context=under, kind=kind, start_time=start,
                                                   attributes={**common, **attributes})  # fmt: skip
            finally:
                tracing.unnamed(token)
            made.end(max(end, start))
            return made

        step_span = span(f"step {n}", ("step", lost.attempt, n), parent, {"ticketiq.step": n}, began, until)
        under = trace.set_span_in_context(step_span)
        span(f"chat {model}", ("chat", lost.attempt, n), under,
             {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.provider.name": "openai",
              "gen_ai.request.model": model, "ticketiq.step": n},
             began, began + int(float(note.get("model_ms", 0.0)) * 1_000_000), SpanKind.CLIENT)  # fmt: skip
        for idx, call in enumerate(note.get("calls") or []):
            sent, came = (_at(t) for t in record.times.get((n, idx), (None, None)))
            if sent is None or came is None:
                continue  # no time kept for it: not drawn rather than drawn wrong
            key = call.get("key") or f"{n}/{idx}"
            span(f"execute_tool {call.get('tool')}", ("call", lost.attempt, key), under,
                 {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.get("tool"),
                  "gen_ai.tool.call.id": call.get("id"), "ticketiq.tool.class": call.get("class"),
                  "ticketiq.step.key": key, "ticketiq.step": n}, sent, came, SpanKind.CLIENT)  # fmt: skip


def _ns(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000_000)


def write_lost(taker: AttemptTrace, lost: LostAttempt, agent: str, traceparent: str | None, step: int | None,
               calls: list[CallInFlight], model_step: bool, chat: LostChat | None = None,
               step_began: int | None = None) -> None:  # fmt: skip
    """Write the lost attempt's spans its process held when it died, under the ids it would have sent them
    with: the attempt, the step in flight, each call in flight (`in_doubt`, its process named), then the
    takeover under `taker`'s attempt, linked to them. `model_step`: the step in flight was asking the model
    (no call of it was made yet); `step` None: no step was in flight (its answer was kept, being handed on)."""
    run_id, trace_id = taker.run_id, taker.trace_id
    common = {tracing.RUN_ID: run_id, tracing.RUN_ATTEMPT: lost.attempt, tracing.PROCESS: lost.process,
              "ticketiq.written_by": taker.common[tracing.PROCESS]}  # fmt: skip
    end = _ns(lost.lost_at)

    def start(name: str, what: tuple[object, ...], parent: Any, attributes: dict[str, Any], at: datetime) -> Span:
        token = tracing.named_ids(trace_id, tracing.span_id(run_id, *what))
        try:
            return tracing.tracer().start_span(name, context=parent, attributes={**common, **attributes},
                                               start_time=_ns(at))  # fmt: skip
        finally:
            tracing.unnamed(token)

    attempt = start(f"invoke_agent {agent}", ("attempt", lost.attempt), tracing.run_parent(run_id, traceparent),
                    {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                     "ticketiq.run.ended_as": lost.ended}, lost.started_at)  # fmt: skip
    began = min([c.marked_at for c in calls if c.marked_at is not None], default=lost.started_at)
    linked = [attempt.get_span_context()]
    ended = [attempt]
    if step is None:
        step = 0
        calls = []
    else:
        if step_began is not None and not any(c.marked_at for c in calls):
            began = datetime.fromtimestamp(step_began / 1e9, UTC)
        in_step = start(f"step {step}", ("step", lost.attempt, step), trace.set_span_in_context(attempt),
                        {"ticketiq.step": step, "ticketiq.step.lost_during": "model call" if model_step else "calls"},
                        began)  # fmt: skip
        linked.append(in_step.get_span_context())
        ended.insert(0, in_step)
        if chat is not None:  # the step's model call answered (its note says so); its span went with the process
            asked = int(chat.started_at * 1_000_000_000)
            token = tracing.named_ids(trace_id, tracing.span_id(run_id, "chat", lost.attempt, step))
            try:
                span = tracing.tracer().start_span(
                    f"chat {chat.model}", context=trace.set_span_in_context(in_step), kind=SpanKind.CLIENT,
                    start_time=asked,
                    attributes={**common, "gen_ai.operation.name": "chat", "gen_ai.system": "openai",
                                "gen_ai.provider.name": "openai", "gen_ai.request.model": chat.model,
                                "ticketiq.step": step, "ticketiq.step.tokens": chat.tokens},
                )  # fmt: skip
            finally:
                tracing.unnamed(token)
            span.end(asked + int(chat.model_ms * 1_000_000))
    for call in calls:
        span = start(f"execute_tool {call.tool}", ("call", lost.attempt, call.key), trace.set_span_in_context(in_step),
                     {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.tool,
                      "ticketiq.tool.class": call.tool_class, "ticketiq.step.key": call.key, "ticketiq.step": step,
                      "ticketiq.call.status": call.status, "ticketiq.call.settled_as": call.happened},
                     call.marked_at or began)  # fmt: skip
        span.set_status(Status(StatusCode.ERROR, call.status))
        span.end(end)
        linked.append(span.get_span_context())
    for span in ended:
        span.set_status(Status(StatusCode.ERROR, lost.ended))
        span.end(end)
    token = tracing.named_ids(trace_id, tracing.span_id(run_id, "takeover", taker.attempt))
    try:
        takeover = tracing.tracer().start_span(
            "takeover", context=trace.set_span_in_context(taker.span), start_time=end,
            links=[Link(context) for context in linked],
            attributes={**taker.common, "ticketiq.takeover.lost_attempt": lost.attempt,
                        "ticketiq.takeover.lost_process": lost.process,
                        "ticketiq.takeover.process": taker.common[tracing.PROCESS],
                        "ticketiq.takeover.loss": lost.ended, "ticketiq.takeover.step": step,
                        "ticketiq.takeover.settled": [f"{c.tool}#{c.idx}: {c.happened}" for c in calls]},
        )  # fmt: skip
    finally:
        tracing.unnamed(token)
    takeover.end()
