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


def test_the_step_histograms_expose_what_prometheus_clients_own_histogram_would() -> None:
    # Kept in plain lists and rendered at scrape: the same lines, to the bucket, as prometheus-client's
    # Histogram given the same observations (a value on a bound counts in that bound's bucket).
    import re

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from ticketiq.metrics import STEP_BUCKETS_S, TOOL_BUCKETS_S

    ours, registry = Metrics(), CollectorRegistry()
    step = Histogram("ticketiq_step_seconds", "One model step: the model call and its tool calls (a step held "
                     "for a person is not counted).", ["agent"], buckets=STEP_BUCKETS_S, registry=registry)  # fmt: skip
    tool = Histogram("ticketiq_tool_call_seconds", "One tool call, from its request to its answer.",
                     ["tool", "class"], buckets=TOOL_BUCKETS_S, registry=registry)  # fmt: skip
    for seconds in (0.0, 0.001, 0.005, 0.0051, 0.3, 1.0, 400.0):
        ours.step("triage", seconds)
        step.labels("triage").observe(seconds)
        ours.tool_call("jira_read", "read", seconds)
        tool.labels("jira_read", "read").observe(seconds)
    ours.step("other", 2.0)
    step.labels("other").observe(2.0)

    def lines(text: str, name: str) -> list[str]:
        # _created carries the time the series began, which differs between the two
        return [re.sub(r"(_created\{.*\}) .*", r"\1", line) for line in text.splitlines() if name in line]

    for name in ("ticketiq_step_seconds", "ticketiq_tool_call_seconds"):
        assert lines(ours.render(lease_lapses=0), name) == lines(generate_latest(registry).decode(), name)
    seen = samples(ours.render(lease_lapses=0))
    assert seen[("ticketiq_step_seconds_bucket", (("agent", "triage"), ("le", "0.005")))] == 3
