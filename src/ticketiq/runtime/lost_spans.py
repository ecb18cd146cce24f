"""The spans a killed process held and never sent, written by the process that took its run over.

A process killed mid-run sends nothing more: the attempt it was driving, the step it was in and that step's
calls were spans it held open, and what it finished last may still have been in its export batch. The
process that takes the run over has the write-ahead record it resumes from (the attempts' rows, the model
steps' notes, each call's mark and times) and writes them from it (`write_takeover`), under the ids the
killed process would have used (`run_spans.py`): a span that process did send is the same span again.

- The lost attempt: from its take to the moment its loss was found, ERROR `lost` (or `stalled`), its
  process named, `ticketiq.written_by` the process that wrote it.
- Its finished steps, with their model calls and the calls whose times were kept.
- The step in flight, with its model call when the record says the model had answered, and each call in
  flight: `ticketiq.call.status` `in_doubt` (a write marked before it was sent) or `in_flight` (a read),
  and `ticketiq.call.settled_as`, what the takeover made of it.
- Then `takeover`, under the attempt that took over, linked to all of them, naming both processes.

The record's times are the database's (attempts, marks) or the processes' own wall clocks (notes, a call's
send and outcome); a time the record does not hold is not drawn rather than drawn wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from ticketiq.runtime import tracing
from ticketiq.runtime.run_spans import AttemptTrace

NS = 1_000_000_000


@dataclass(frozen=True)
class LostAttempt:
    """What the record says of an attempt that was lost: its process, its take and its loss's finding."""

    attempt: int
    process: str
    started_at: datetime
    lost_at: datetime
    ended: str  # lost, or stalled (its process lived on but let the lease lapse)


class AttemptRecord(Protocol):
    """An attempt as the record holds it (storage's `AttemptRow`)."""

    @property
    def attempt(self) -> int: ...
    @property
    def process(self) -> str: ...
    @property
    def started_at(self) -> datetime: ...
    @property
    def ended_at(self) -> datetime | None: ...
    @property
    def ended(self) -> str | None: ...


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
    # (step, idx) -> when the call went out and when its outcome came back: datetimes, or epoch seconds of
    # the process's clock for a finished call still riding in the checkpoint
    times: dict[tuple[int, int], tuple[Any, Any]] = field(default_factory=dict)


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


def ns(value: Any) -> int | None:
    """A time as the record holds it (a datetime, or epoch seconds) in nanoseconds; None when unknown."""
    if isinstance(value, datetime):
        return int(value.timestamp() * NS)
    if isinstance(value, int | float):
        return int(value * NS)
    return None


class _Writer:
    """The spans of one lost attempt, under the ids its process used, on behalf of the one that took over."""

    def __init__(self, taker: AttemptTrace, lost: LostAttempt, model: str) -> None:
        self.taker, self.lost, self.model = taker, lost, model
        self.common: dict[str, Any] = {tracing.RUN_ID: taker.run_id, tracing.RUN_ATTEMPT: lost.attempt,
                                       tracing.PROCESS: lost.process}  # fmt: skip

    def span(self, name: str, what: tuple[object, ...], parent: Any, attributes: dict[str, Any], start: int,
             end: int | None, kind: SpanKind = SpanKind.INTERNAL) -> Span:  # fmt: skip
        made = tracing.named_span(self.taker.trace_id, tracing.span_id(self.taker.run_id, *what), name, parent,
                                  {**self.common, **attributes}, kind, start)  # fmt: skip
        if end is not None:
            made.end(max(end, start))
        return made

    def chat(self, parent: Span, n: int, started: int, model_ms: float, **more: Any) -> Span:
        return self.span(f"chat {self.model}", ("chat", self.lost.attempt, n), trace.set_span_in_context(parent),
                         {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.provider.name": "openai",
                          "gen_ai.request.model": self.model, "ticketiq.step": n, **more},
                         started, started + int(model_ms * 1_000_000), SpanKind.CLIENT)  # fmt: skip

    def finished(self, attempt: Any, notes: Sequence[dict[str, Any]], record: Record, until: int) -> None:
        """The steps the lost attempt finished, from their notes: its process sent them unless they were
        still in its batch when it died."""
        starts = [int(float(n["started_at"]) * NS) for n in notes] + [until]
        for i, note in enumerate(notes):
            n = int(note.get("step", 0))
            step = self.span(f"step {n}", ("step", self.lost.attempt, n), attempt, {"ticketiq.step": n},
                             starts[i], starts[i + 1])  # fmt: skip
            self.chat(step, n, starts[i], float(note.get("model_ms", 0.0)))
            for idx, call in enumerate(note.get("calls") or []):
                sent, came = (ns(t) for t in record.times.get((n, idx), (None, None)))
                if sent is None or came is None:
                    continue
                key = call.get("key") or f"{n}/{idx}"
                self.span(f"execute_tool {call.get('tool')}", ("call", self.lost.attempt, key),
                          trace.set_span_in_context(step),
                          {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.get("tool"),
                           "gen_ai.tool.call.id": call.get("id"), "ticketiq.tool.class": call.get("class"),
                           "ticketiq.step.key": key, "ticketiq.step": n}, sent, came, SpanKind.CLIENT)  # fmt: skip


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
    """Write what the attempt `taker` took the run over from held when it was lost (the module says what);
    `step`: the checkpointed step; `in_flight`: each call that step left (the call, its status, what the
    takeover made of it); `handing_on`: the lost attempt was handing a kept answer on (no step in flight)."""
    lost = lost_attempt(record.attempts, taker.attempt)
    if lost is None:
        return
    out = _Writer(taker, lost, model)
    lost_at = int(lost.lost_at.timestamp() * NS)
    model_step = not in_flight and not handing_on  # it died asking the model for the next step
    in_step = None if handing_on else step + (1 if model_step else 0)
    notes = sorted((n["body"] for n in record.notes if n.get("kind") in ("model_step", "model_answer")
                    and n["body"].get("attempt") == lost.attempt and "started_at" in n["body"]),
                   key=lambda body: int(body.get("step", 0)))  # fmt: skip
    done = [n for n in notes if in_step is None or int(n.get("step", 0)) < in_step]
    # When the step before the one in flight was done: its model call's end, or its last call's.
    ends = [int(float(n["started_at"]) * NS + float(n.get("model_ms", 0.0)) * 1e6) for n in done[-1:]]
    ends += [t for n in done[-1:] for i in range(len(n.get("calls") or []))
             if (t := ns(record.times.get((int(n.get("step", 0)), i), (None, None))[1])) is not None]  # fmt: skip
    calls = [(c, status, happened, record.marked.get((step, c.idx))) for c, status, happened in in_flight]
    marks = [t for *_, m in calls if (t := ns(m)) is not None]
    # The step in flight began when its model was asked (its note, once the model answered), else at its first
    # call's mark, else when the step before it was done, else at the take.
    asked = None if model_step else next((n for n in notes if int(n.get("step", 0)) == in_step), None)
    began = (int(float(asked["started_at"]) * NS) if asked is not None else min(marks) if marks
             else max(ends) if ends else int(lost.started_at.timestamp() * NS))  # fmt: skip

    held = {"ticketiq.written_by": taker.common[tracing.PROCESS]}
    taken = int(lost.started_at.timestamp() * NS)
    attempt = out.span(f"invoke_agent {agent}", ("attempt", lost.attempt),
                       tracing.run_parent(taker.run_id, traceparent),
                       {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent,
                        "ticketiq.run.ended_as": lost.ended, **held}, taken, None)  # fmt: skip
    under_attempt = trace.set_span_in_context(attempt)
    out.finished(under_attempt, done, record, began)
    linked, ended = [attempt.get_span_context()], [attempt]
    if in_step is not None:
        during = "model call" if model_step else "calls"
        in_step_span = out.span(f"step {in_step}", ("step", lost.attempt, in_step), under_attempt,
                                {"ticketiq.step": in_step, "ticketiq.step.lost_during": during, **held},
                                began, None)  # fmt: skip
        linked.append(in_step_span.get_span_context())
        ended.insert(0, in_step_span)
        if asked is not None:  # the step's model call answered; its span went with the process
            out.chat(in_step_span, in_step, int(float(asked["started_at"]) * NS), float(asked.get("model_ms", 0.0)),
                     **held)  # fmt: skip
        for call, status, happened, marked in calls:
            key = call.step_key or f"{step}/{call.idx}"
            span = out.span(f"execute_tool {call.tool}", ("call", lost.attempt, key),
                            trace.set_span_in_context(in_step_span),
                            {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.tool,
                             "ticketiq.tool.class": call.tool_class.value, "ticketiq.step.key": key,
                             "ticketiq.step": in_step, "ticketiq.call.status": status,
                             "ticketiq.call.settled_as": happened, **held}, ns(marked) or began, None)  # fmt: skip
            span.set_status(Status(StatusCode.ERROR, status))
            span.end(lost_at)
            linked.append(span.get_span_context())
    for span in ended:
        span.set_status(Status(StatusCode.ERROR, lost.ended))
        span.end(max(lost_at, began))
    tracing.named_span(
        taker.trace_id, tracing.span_id(taker.run_id, "takeover", taker.attempt), "takeover",
        trace.set_span_in_context(taker.span),
        {**taker.common, "ticketiq.takeover.lost_attempt": lost.attempt, "ticketiq.takeover.lost_process": lost.process,
         "ticketiq.takeover.process": taker.common[tracing.PROCESS], "ticketiq.takeover.loss": lost.ended,
         "ticketiq.takeover.step": in_step or 0,
         "ticketiq.takeover.settled": [f"{c.tool}#{c.idx}: {happened}" for c, _, happened, _ in calls]},
        start_time=lost_at, links=[Link(context) for context in linked],
    ).end()  # fmt: skip
