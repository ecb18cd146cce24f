"""Process metrics for `GET /metrics`, through prometheus-client. Counters are per process; a scraper
sums them across processes. Each process has a registry of its own, so two engines in one Python
process (tests, benchmarks) never share a count."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

RECOVERY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 11.0, 15.0, 30.0, 60.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _LeaseLapses(Collector):
    """Leases the process's lease keeper found lost: read from the keeper when scraped."""

    def __init__(self) -> None:
        self.count: Callable[[], int] = lambda: 0

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(
            "ticketiq_lease_lapses", "Leases this process found lost (taken over or lapsed).", value=self.count()
        )


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
        self._lapses = _LeaseLapses()
        self.registry.register(self._lapses)

    def resumed(self) -> None:
        self._resumed.inc()

    def lost(self) -> None:
        self._lost.inc()

    def claimed(self, why: str) -> None:
        self._claims.labels(why=why).inc()

    def settled(self, kind: str) -> None:
        self._settlements.labels(kind=kind).inc()

    def render(self, lease_lapses: int) -> str:
        """The Prometheus text exposition; `lease_lapses`: leases the process's keeper found lost."""
        self._lapses.count = lambda: lease_lapses
        return generate_latest(self.registry).decode()
