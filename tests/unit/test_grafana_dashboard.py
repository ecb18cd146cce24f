"""deploy/grafana/ticketiq.json graphs what GET /metrics exposes, and all of it that a person graphs.

The names the app exposes are read from the metrics registry itself (`Metrics()`, rendered as a scrape
renders it), so a metric renamed or dropped in metrics.py fails this test, and so does a dashboard
expression naming a metric nobody exposes. The labels each is graphed by are checked on a real scrape
after real runs (tests/acceptance/test_cli_runs.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ticketiq.metrics import Gauges, Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "ticketiq.json"
# The metrics a person graphs (issue 16's contract), each as a scrape shows it.
GRAPHED = {
    "ticketiq_runs_started_total", "ticketiq_runs_ended_total", "ticketiq_step_seconds_bucket",
    "ticketiq_model_call_seconds_bucket", "ticketiq_tool_call_seconds_bucket", "ticketiq_runs_waiting",
    "ticketiq_approvals_pending", "ticketiq_jobs_queued", "ticketiq_recovery_seconds_bucket",
    "ticketiq_runs_resumed_total", "ticketiq_lease_lapses_total", "ticketiq_claims_total",
    "ticketiq_settlements_total", "ticketiq_retention_deleted_total", "ticketiq_retention_oldest_seconds",
    "ticketiq_retention_pass_seconds_bucket",
}  # fmt: skip
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
}
_METRIC = re.compile(r"\bticketiq_[a-z0-9_]+\b")


def exposed() -> set[str]:
    """Every sample name a scrape of the app can show: each family's `# TYPE` line, with the suffixes
    its samples carry."""
    text = Metrics().render(lease_lapses=0, gauges=Gauges(runs_waiting=0, approvals_pending=0, jobs_queued=0))
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            # A counter's TYPE line names it with or without `_total` (the client's versions differ).
            name = name.removesuffix("_total") if kind == "counter" else name
            names |= {name + suffix for suffix in SUFFIXES.get(kind, ("",))}
    return names


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels") or [])


def expressions(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets") or []]


def load() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def test_it_is_a_current_grafana_dashboard_over_a_prometheus_datasource_variable() -> None:
    dashboard = load()
    assert dashboard["schemaVersion"] >= 39  # Grafana 11 and later
    assert dashboard["uid"] and dashboard["title"]
    [source] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert source["query"] == "prometheus"
    uid = "${" + source["name"] + "}"
    queried = [p for p in panels(dashboard["panels"]) if p.get("targets")]
    assert queried
    for panel in queried:
        assert panel["datasource"] == {"type": "prometheus", "uid": uid}, panel["title"]
        assert all(t["datasource"]["uid"] == uid for t in panel["targets"]), panel["title"]
        assert panel.get("description"), panel["title"]
    ids = [p["id"] for p in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids))


def test_every_expression_names_a_metric_the_app_exposes() -> None:
    names = exposed()
    named: set[str] = set()
    for expr in expressions(load()):
        used = set(_METRIC.findall(expr))
        assert used, expr
        missing = used - names
        assert not missing, f"{expr}: {sorted(missing)} not exposed by metrics.py (it exposes {sorted(names)})"
        named |= used
    assert named >= GRAPHED, f"not graphed: {sorted(GRAPHED - named)}"


def test_quantiles_come_from_buckets_grouped_by_le() -> None:
    for expr in expressions(load()):
        if "histogram_quantile" in expr:
            by = re.search(r"sum by \(([^)]*)\) \(rate\((ticketiq_[a-z_]+)", expr)
            assert by is not None, expr
            assert by.group(2).endswith("_bucket") and "le" in {g.strip() for g in by.group(1).split(",")}, expr
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
