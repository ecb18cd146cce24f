"""Traces over OTLP, with the OpenTelemetry SDK: one trace per run, whichever processes drive it.

Configured only by OpenTelemetry's own variables: `OTEL_EXPORTER_OTLP_ENDPOINT` (or its `_TRACES_`
form) turns tracing on; `OTEL_EXPORTER_OTLP_PROTOCOL` picks `http/protobuf` (the default) or `grpc`;
`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER` and the exporter's headers and
timeout are read by the SDK as it documents them. With no endpoint nothing is made: `ON` is false, and
every place that would trace asks it first, so a process without a collector pays one attribute read a
step.

A collector that is down or slow never slows a run: finished spans go to a bounded queue, and a thread
of the SDK sends them in batches (`BatchSpanProcessor`). What the queue cannot hold, and what the
exporter gave up on, is dropped and counted (`dropped()`, the `ticketiq_trace_spans_dropped_total`
metric), never retried on a step's path.

Ids. A run's trace id is its trace parent's (the W3C `traceparent` of the request that started it, kept
in its checkpoint) or else its own id (a UUID is 128 bits): whichever process drives an attempt, its
spans land in the same trace. Span ids are derived from the run, the attempt and what the span is (the
step, the call's key): a span written twice (the resuming process writes the spans a killed one never
sent, runtime/run_spans.py) is the same span, never two. The SDK's id generator is told the ids through
a context variable, its public extension point (`DerivedIds`).
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import threading
import uuid
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

ON = False
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SERVICE = "ticketiq"
# Every span of a run carries these two.
RUN_ID = "ticketiq.run.id"
RUN_ATTEMPT = "ticketiq.run.attempt"
PROCESS = "ticketiq.process"

# The traceparent of the request being served (entries/trace_context.py): the parent of a run it starts.
INCOMING: contextvars.ContextVar[str | None] = contextvars.ContextVar("ticketiq_incoming_traceparent", default=None)
_NEXT: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("ticketiq_next_ids", default=None)
_PROPAGATOR = TraceContextTextMapPropagator()
_provider: TracerProvider | None = None
_queue_metrics: InMemoryMetricReader | None = None
_tracer: trace.Tracer | None = None
_dropped = [0]
_dropped_lock = threading.Lock()


def wanted(env: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """Whether the environment asks for traces: an OTLP endpoint is set."""
    env = os.environ if env is None else env
    return any(env.get(name, "").strip() for name in ENDPOINT_VARIABLES)


def protocol(env: os._Environ[str] | dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    chosen = (env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "").strip()
    return chosen or "http/protobuf"


def start() -> bool:
    """Turn tracing on when the environment asks for it (once a process); whether it is on."""
    global ON, _provider, _tracer
    if ON or not wanted():
        return ON
    chosen = protocol()
    if chosen == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter

        exporter: SpanExporter = GrpcExporter()
    elif chosen == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter

        exporter = HttpExporter()
    else:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL={chosen!r}: TicketIQ sends http/protobuf or grpc")
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the default name (the SDK reads them). The
    # process is each span's own attribute: tests run several app processes in one interpreter.
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or SERVICE})
    _provider = TracerProvider(resource=resource, id_generator=DerivedIds())
    # The processor counts what its full queue drops as an OpenTelemetry metric; read here, not exported.
    global _queue_metrics
    _queue_metrics = InMemoryMetricReader()
    counted = MeterProvider(metric_readers=[_queue_metrics])
    _provider.add_span_processor(BatchSpanProcessor(Counted(exporter), meter_provider=counted))
    _tracer = _provider.get_tracer("ticketiq")
    ON = True
    return True


def flush(timeout_s: float) -> bool:
    """Send what is queued, waiting at most `timeout_s` (a blocking call: from a thread)."""
    return _provider.force_flush(int(timeout_s * 1000)) if _provider is not None else True


def stop(timeout_s: float = 5.0) -> None:
    """Send what is queued (within `timeout_s`) and stop; tracing is off after."""
    global ON, _provider, _tracer
    if _provider is not None:
        _provider.force_flush(int(timeout_s * 1000))
        _provider.shutdown()
    ON, _provider, _tracer = False, None, None


def tracer() -> trace.Tracer:
    assert _tracer is not None, "tracing is off: ask tracing.ON first"
    return _tracer


def dropped() -> int:
    """Spans dropped since the start: the queue was full, or the exporter gave up on them."""
    return _dropped[0] + _queue_dropped()


def _queue_dropped() -> int:
    """What the batch processor's full queue dropped: its `otel.sdk.processor.span.processed` points that
    carry an `error.type`."""
    if _queue_metrics is None:
        return 0
    data = _queue_metrics.get_metrics_data()
    total = 0
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "otel.sdk.processor.span.processed":
                    continue
                for point in metric.data.data_points:
                    if isinstance(point, NumberDataPoint) and point.attributes and point.attributes.get("error.type"):
                        total += int(point.value)
    return total


def _drop(count: int) -> None:
    with _dropped_lock:
        _dropped[0] += count


class Counted(SpanExporter):
    """The OTLP exporter, with what it could not send counted as dropped."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:
            _drop(len(spans))
            raise
        if result is not SpanExportResult.SUCCESS:
            _drop(len(spans))
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


class DerivedIds(IdGenerator):
    """Random ids, except for a span started with ids of its own (`named_span`): a run's spans."""

    def __init__(self) -> None:
        self.random = RandomIdGenerator()

    def generate_span_id(self) -> int:
        named = _NEXT.get()
        return named[1] if named is not None else self.random.generate_span_id()

    def generate_trace_id(self) -> int:
        named = _NEXT.get()
        return named[0] if named is not None else self.random.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return True  # a run's id is a random UUID; a trace parent's id is its sender's


def named_span(trace_id: int, span_id: int, name: str, parent: Any, attributes: dict[str, Any],
               kind: trace.SpanKind = trace.SpanKind.INTERNAL, start_time: int | None = None,
               links: Sequence[trace.Link] = ()) -> trace.Span:  # fmt: skip
    """A span started under the ids given (a run's: `span_id`), not random ones."""
    token = _NEXT.set((trace_id, span_id))
    try:
        return tracer().start_span(name, context=parent, kind=kind, attributes=attributes, start_time=start_time,
                                   links=links)  # fmt: skip
    finally:
        _NEXT.reset(token)


def span_id(run_id: str, *what: object) -> int:
    """The id of a run's span, from the run and what the span is: the same inputs, the same id."""
    text = "/".join([run_id, *(str(part) for part in what)]).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") or 1


def parent_of(traceparent: str | None) -> SpanContext | None:
    """The span context a W3C `traceparent` names, or None when it is absent or malformed."""
    if not traceparent:
        return None
    found = trace.get_current_span(_PROPAGATOR.extract({"traceparent": traceparent})).get_span_context()
    return found if found.is_valid else None


def run_trace_id(run_id: str, traceparent: str | None) -> int:
    parent = parent_of(traceparent)
    return parent.trace_id if parent is not None else uuid.UUID(run_id).int


def run_parent(run_id: str, traceparent: str | None) -> Any:
    """The context a run's attempt spans start in: under the request that started the run, else at the
    root of the run's own trace."""
    parent = parent_of(traceparent)
    if parent is None:
        return trace.set_span_in_context(trace.INVALID_SPAN)
    return trace.set_span_in_context(NonRecordingSpan(parent))


def parent_for_new_run(given: str | None) -> str | None:
    """The traceparent a run being made is started under, well formed or none: the one given, else the
    current span's (a run its parent's tool call starts: a delegation), else the request's that asked."""
    for found in (given, traceparent_now() if ON else None, INCOMING.get()):
        if found and parent_of(found) is not None:
            return found
    return None


def traceparent_now() -> str | None:
    """The W3C `traceparent` of the current span, for a request this process sends; None outside one."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier)
    return carrier.get("traceparent")


def sampled_flags() -> TraceFlags:
    return TraceFlags(TraceFlags.SAMPLED)
