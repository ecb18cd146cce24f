"""bench/peers/step_bench.py's arithmetic: the ratios of TicketIQ to a peer, each taken within one round, as
a range with their median once there are three rounds or more."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "peers"))

from step_bench import ratios


def figures(wall_s: float, cpu_s: float) -> dict[str, Any]:
    return {"runs": 10, "steps_per_run": 10, "wall_s": wall_s, "cpu_s": cpu_s, "statements": 100}


def test_each_ratio_is_taken_within_its_round_with_the_median_of_three_or_more() -> None:
    rounds = [
        {"ticketiq": figures(0.1, 0.05), "langgraph": figures(1.0, 0.5)},
        {"ticketiq": figures(0.2, 0.06), "langgraph": figures(1.0, 0.4)},
        {"ticketiq": figures(0.1, 0.09), "langgraph": figures(0.4, 0.5)},
    ]
    lines = ratios(["ticketiq", "langgraph"], rounds)
    assert lines[0] == "TicketIQ / langgraph wall        0.10-0.25x (median 0.20x)"
    assert lines[1] == "TicketIQ / langgraph client CPU  0.10-0.18x (median 0.15x)"
    assert lines[2] == "TicketIQ / langgraph statements  1.00x (median 1.00x)"


def test_two_rounds_give_the_range_alone_and_a_failed_round_is_left_out() -> None:
    rounds = [
        {"ticketiq": figures(0.1, 0.05), "langgraph": figures(1.0, 0.5)},
        {"ticketiq": figures(0.2, 0.06), "langgraph": figures(1.0, 0.4)},
        {"ticketiq": figures(0.1, 0.09), "langgraph": {"error": "its process failed"}},
    ]
    assert ratios(["ticketiq", "langgraph"], rounds)[0] == "TicketIQ / langgraph wall        0.10-0.20x"
