from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from ticketiq.metrics import Metrics


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_engine_s_metrics_keep_their_names_in_the_prometheus_exposition() -> None:
    metrics = Metrics()
    metrics.resumed()
    metrics.claimed("dead")
    metrics.claimed("dead")
    metrics.settled("found")
    metrics.recovery.observe(0.7)
    seen = samples(metrics.render(lease_lapses=3))
    assert seen[("ticketiq_runs_resumed_total", ())] == 1
    assert seen[("ticketiq_runs_lost_total", ())] == 0
    assert seen[("ticketiq_claims_total", (("why", "dead"),))] == 2
    assert seen[("ticketiq_settlements_total", (("kind", "found"),))] == 1
    assert seen[("ticketiq_lease_lapses_total", ())] == 3
    assert seen[("ticketiq_recovery_seconds_bucket", (("le", "1.0"),))] == 1
    assert seen[("ticketiq_recovery_seconds_bucket", (("le", "0.5"),))] == 0
    assert seen[("ticketiq_recovery_seconds_count", ())] == 1


def test_two_engines_in_one_python_process_count_apart() -> None:
    first, second = Metrics(), Metrics()
    first.resumed()
    assert samples(second.render(lease_lapses=0))[("ticketiq_runs_resumed_total", ())] == 0
