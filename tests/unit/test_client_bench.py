"""bench/client.py's arithmetic: the wake-up latency of an answer from the run's `finished_at` (any
offset), the percentiles, the ratio over rounds; and bench/baseline.py's processes of an earlier commit
run without a PYTHONPATH that could put today's package first."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from baseline import Baseline
from client import Tally, percentile, ratio


def test_wake_latency_is_the_answer_time_less_finished_at_whatever_the_offset() -> None:
    finished = datetime(2026, 12, 6, 23, 0, 0, 250000, tzinfo=timezone(timedelta(hours=2)))
    tally = Tally()
    tally.ended({"status": "succeeded", "finished_at": finished.isoformat()}, finished.timestamp() + 0.0375)
    tally.ended({"status": "failed", "finished_at": None}, finished.timestamp())
    assert tally.statuses == {"succeeded": 1, "failed": 1}
    assert len(tally.wake_ms) == 1 and abs(tally.wake_ms[0] - 37.5) < 0.01
    utc = finished.astimezone(UTC).isoformat().replace("+00:00", "Z")  # the same instant, written in UTC
    tally.ended({"status": "succeeded", "finished_at": utc}, finished.timestamp() + 0.0375)
    assert abs(tally.wake_ms[1] - 37.5) < 0.01


def test_percentiles_of_few_and_of_none() -> None:
    assert percentile([], 50) is None
    assert percentile([4.0], 99) == 4.0
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5
    assert percentile(values, 99) == 99.0


def test_ratio_sums_the_rounds_rather_than_averaging_their_ratios() -> None:
    rounds = [
        {"sides": {"baseline": {"app_cpu_ms_per_run": 10.0}, "current": {"app_cpu_ms_per_run": 5.0}}},
        {"sides": {"baseline": {"app_cpu_ms_per_run": 30.0}, "current": {"app_cpu_ms_per_run": 25.0}}},
    ]
    assert ratio(rounds[:1]) == 0.5
    assert ratio(rounds) == 0.75  # 30 / 40, not the mean of 0.5 and 0.833


def test_an_earlier_commits_processes_get_no_pythonpath() -> None:
    found = Baseline("d7c25d5", "d7c25d5" + "0" * 33, Path("/nowhere/tree"), Path("/nowhere/python"))
    env = found.env({"PYTHONPATH": "/work/src", "PYTHONHOME": "/x", "TICKETIQ_HOME": "/h", "PATH": "/bin"})
    assert env == {"TICKETIQ_HOME": "/h", "PATH": "/bin"}
