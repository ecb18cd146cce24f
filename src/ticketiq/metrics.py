"""Process metrics for `GET /metrics`, through prometheus-client. Counters and histograms are per
process; a scraper sums them across processes. Each process has a registry of its own, so two engines in
one Python process (tests, benchmarks) never share a count. The gauges of the whole cluster (waiting
runs, pending approvals, queued jobs) are read from the database at scrape (`Gauges`), by one bounded
statement: a scrape while the database is down answers without them, never hangs."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

RECOVERY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 11.0, 15.0, 30.0, 60.0)
# A step and a model call take from milliseconds (a stand-in, a cache) to minutes (a slow model); a tool
# call from a millisecond to its request timeout.
STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
TOOL_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A retention pass takes a moment when little is due and minutes after a long pause with millions due.
RETENTION_BUCKETS_S = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class Gauges:
    """The cluster's queues, as one statement read them at scrape."""

    runs_waiting: int
    approvals_pending: int
    jobs_queued: int


class _Gauges(Collector):
    """The gauges read at this scrape; none when they could not be read (the database is down)."""

    def __init__(self) -> None:
        self.now: Gauges | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        if self.now is None:
            return
        yield GaugeMetricFamily("ticketiq_runs_waiting", "Runs waiting for a person (input or an approval).",
                                value=self.now.runs_waiting)  # fmt: skip
        yield GaugeMetricFamily("ticketiq_approvals_pending", "Calls held for a person's decision.",
                                value=self.now.approvals_pending)  # fmt: skip
        yield GaugeMetricFamily("ticketiq_jobs_queued", "Background jobs waiting for a worker.",
                                value=self.now.jobs_queued)  # fmt: skip


class _ReadCounter(Collector):
    """A count another part of the process keeps, read from it when scraped."""

    def __init__(self, name: str, documentation: str) -> None:
        self.name = name
        self.documentation = documentation
        self.count: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.count())


class _Series:
    """One label set's observations: the count in each bucket (not cumulative; the last is +Inf)."""

    __slots__ = ("counts", "created", "total")

    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets
        self.total = 0.0
        self.created = time.time()


class _StepHistogram(Collector):
    """A histogram observed on every step (the step, its model call, its tool call), kept in plain lists
    and made into prometheus-client's family only when scraped. prometheus-client's own Histogram takes
    a lock and finds its labelled child on every observation: three of them cost a step 4.7 µs, these
    1.1 (timeit). Observed only from the event loop's thread; a scrape reads a copy. The exposition is
    prometheus-client's: `_bucket` (cumulative, `le` as it formats it), `_count`, `_sum`, `_created`."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> None:
        self.name = name
        self.documentation = documentation
        self.labels = labels
        self.bounds = buckets
        self.le = [*(floatToGoString(b) for b in buckets), "+Inf"]  # type: ignore[no-untyped-call]
        self.series: dict[tuple[str, ...], _Series] = {}

    def observe(self, key: tuple[str, ...], seconds: float) -> None:
        found = self.series.get(key)
        if found is None:
            found = self.series[key] = _Series(len(self.le))
        found.counts[bisect_left(self.bounds, seconds)] += 1  # the first bound at or above: `le` includes it
        found.total += seconds

    def collect(self) -> Iterator[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation, labels=list(self.labels))
        for key, series in list(self.series.items()):
            cumulative, buckets = 0, []
            for le, count in zip(self.le, list(series.counts), strict=True):
                cumulative += count
                buckets.append((le, float(cumulative)))
            family.add_metric(list(key), buckets, series.total)
            family.add_sample(f"{self.name}_created", dict(zip(self.labels, key, strict=True)), series.created)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._resumed = Counter(
            "ticketiq_runs_resumed", "Runs resumed from their checkpoint after a loss.", registry=self.registry
        )
        self._lost = Counter(
            "ticketiq_runs_lost", "Runs failed for being lost more often than the limit.", registry=self.registry
        )
        self._claims = Counter(
            "ticketiq_claims",
            "Lapsed or dead-holder leases claimed by this process's sweeps.",
            ["why"],
            registry=self.registry,
        )
        self._settlements = Counter(
            "ticketiq_settlements",
            "Calls a resumed step left, by what happened to them.",
            ["kind"],
            registry=self.registry,
        )
        self.recovery = Histogram(
            "ticketiq_recovery_seconds",
            "From a loss detected to its run executing again.",
            buckets=RECOVERY_BUCKETS_S,
            registry=self.registry,
        )
        self._lapses = _ReadCounter("ticketiq_lease_lapses", "Leases this process found lost (taken over or lapsed).")
        self.registry.register(self._lapses)
        # Spans the trace exporter dropped (its queue full, or the collector refused or did not answer):
        # read from runtime/tracing.py at the scrape (`spans_dropped`, set by the process).
        self._spans_dropped = _ReadCounter(
            "ticketiq_trace_spans_dropped", "Spans dropped, never sent: the export queue was full or the "
            "collector could not take them."
        )  # fmt: skip
        self.registry.register(self._spans_dropped)
        self._runs_started = Counter(
            "ticketiq_runs_started", "Runs this process started (their first attempt).", ["agent", "channel"],
            registry=self.registry,
        )  # fmt: skip
        self._runs_ended = Counter(
            "ticketiq_runs_ended", "Runs this process ended, by the status they ended in.",
            ["agent", "channel", "status"], registry=self.registry,
        )  # fmt: skip
        self._step = _StepHistogram(
            "ticketiq_step_seconds", "One model step: the model call and its tool calls (a step held for a "
            "person is not counted).", ("agent",), STEP_BUCKETS_S,
        )  # fmt: skip
        self._model_call = _StepHistogram(
            "ticketiq_model_call_seconds", "One request to the model.", ("agent",), STEP_BUCKETS_S
        )
        self._tool_call = _StepHistogram(
            "ticketiq_tool_call_seconds", "One tool call, from its request to its answer.", ("tool", "class"),
            TOOL_BUCKETS_S,
        )  # fmt: skip
        for histogram in (self._step, self._model_call, self._tool_call):
            self.registry.register(histogram)
        self._gauges = _Gauges()
        self.registry.register(self._gauges)
        self._retention_deleted = Counter(
            "ticketiq_retention_deleted", "Rows the retention passes of this process deleted, by table.", ["table"],
            registry=self.registry,
        )  # fmt: skip
        self._retention_oldest = Gauge(
            "ticketiq_retention_oldest_seconds", "Age of the oldest row of each table a retention policy is about, "
            "as this process's last pass read it.", ["table"], registry=self.registry,
        )  # fmt: skip
        self._retention_pass = Histogram(
            "ticketiq_retention_pass_seconds", "One retention pass, from its start to its end.",
            buckets=RETENTION_BUCKETS_S, registry=self.registry,
        )  # fmt: skip

    def count_spans_dropped(self, count: Callable[[], int]) -> None:
        self._spans_dropped.count = count

    def resumed(self) -> None:
        self._resumed.inc()

    def lost(self) -> None:
        self._lost.inc()

    def claimed(self, why: str) -> None:
        self._claims.labels(why=why).inc()

    def settled(self, kind: str) -> None:
        self._settlements.labels(kind=kind).inc()

    def run_started(self, agent: str, channel: str) -> None:
        self._runs_started.labels(agent=agent, channel=channel).inc()

    def run_ended(self, agent: str, channel: str, status: str) -> None:
        self._runs_ended.labels(agent=agent, channel=channel, status=status).inc()

    def step(self, agent: str, seconds: float) -> None:
        self._step.observe((agent,), seconds)

    def model_call(self, agent: str, seconds: float) -> None:
        self._model_call.observe((agent,), seconds)

    def tool_call(self, tool: str, cls: str, seconds: float) -> None:
        self._tool_call.observe((tool, cls), seconds)

    def retention_pass(self, seconds: float, deleted: dict[str, int], oldest: dict[str, float | None]) -> None:
        """One retention pass: its duration, what it deleted per table, each table's oldest row (an empty
        table shows 0)."""
        self._retention_pass.observe(seconds)
        for table, count in deleted.items():
            if count:
                self._retention_deleted.labels(table=table).inc(count)
        for table, age in oldest.items():
            self._retention_oldest.labels(table=table).set(age or 0.0)

    def render(self, lease_lapses: int, gauges: Gauges | None = None) -> str:
        """The Prometheus text exposition; `lease_lapses`: leases the process's keeper found lost;
        `gauges`: the queues as read at this scrape (None: not read, and not shown)."""
        self._lapses.count = lambda: lease_lapses
        self._gauges.now = gauges
        return generate_latest(self.registry).decode()
