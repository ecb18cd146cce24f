"""Process metrics in the Prometheus text format (`GET /metrics`). Counters are per process; a
scraper sums them across processes."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

RECOVERY_BUCKETS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 11.0, 15.0, 30.0, 60.0)


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.n += 1
        index = bisect.bisect_left(self.buckets, value)
        for i in range(index, len(self.buckets)):
            self.counts[i] += 1


@dataclass
class Metrics:
    runs_resumed: int = 0
    runs_lost: int = 0  # failed for passing the loss limit (I7)
    claims: dict[str, int] = field(default_factory=dict)  # by why: lapsed, dead
    settlements: dict[str, int] = field(default_factory=dict)  # by route
    recovery: Histogram = field(default_factory=lambda: Histogram(RECOVERY_BUCKETS_S))

    def claimed(self, why: str) -> None:
        self.claims[why] = self.claims.get(why, 0) + 1

    def settled(self, how: str) -> None:
        self.settlements[how] = self.settlements.get(how, 0) + 1

    def render(self, lease_lapses: int) -> str:
        """`lease_lapses`: leases this process found lost, counted by its lease keeper."""
        lines = [
            "# HELP ticketiq_runs_resumed_total Runs resumed from their checkpoint after a loss.",
            "# TYPE ticketiq_runs_resumed_total counter",
            f"ticketiq_runs_resumed_total {self.runs_resumed}",
            "# HELP ticketiq_runs_lost_total Runs failed for being lost more often than the limit.",
            "# TYPE ticketiq_runs_lost_total counter",
            f"ticketiq_runs_lost_total {self.runs_lost}",
            "# HELP ticketiq_lease_lapses_total Leases this process found lost (taken over or lapsed).",
            "# TYPE ticketiq_lease_lapses_total counter",
            f"ticketiq_lease_lapses_total {lease_lapses}",
            "# HELP ticketiq_claims_total Lapsed or dead-holder leases claimed by this process's sweeps.",
            "# TYPE ticketiq_claims_total counter",
        ]
        for why in sorted(self.claims) or ["lapsed"]:
            lines.append(f'ticketiq_claims_total{{why="{why}"}} {self.claims.get(why, 0)}')
        lines += [
            "# HELP ticketiq_settlements_total Calls a resumed step left, by how they were settled.",
            "# TYPE ticketiq_settlements_total counter",
        ]
        for how in sorted(self.settlements):
            lines.append(f'ticketiq_settlements_total{{kind="{how}"}} {self.settlements[how]}')
        lines += [
            "# HELP ticketiq_recovery_seconds From a loss detected to its run executing again.",
            "# TYPE ticketiq_recovery_seconds histogram",
        ]
        for bound, count in zip(self.recovery.buckets, self.recovery.counts, strict=True):
            lines.append(f'ticketiq_recovery_seconds_bucket{{le="{bound}"}} {count}')
        lines += [
            f'ticketiq_recovery_seconds_bucket{{le="+Inf"}} {self.recovery.n}',
            f"ticketiq_recovery_seconds_sum {self.recovery.total}",
            f"ticketiq_recovery_seconds_count {self.recovery.n}",
        ]
        return "\n".join(lines) + "\n"
