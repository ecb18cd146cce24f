from __future__ import annotations

from ticketiq.engine.driver import fenced_off
from ticketiq.errors import Fenced, LeaseLost


def test_a_fence_or_a_lost_lease_stops_a_run_quietly_also_from_inside_a_step_s_task_group() -> None:
    fenced = Fenced("r", 1, "marking a call in doubt")
    lost = LeaseLost("r", "taken over")
    assert fenced_off(fenced) is fenced
    assert fenced_off(lost) is lost
    assert fenced_off(ExceptionGroup("step", [fenced])) is fenced
    assert fenced_off(ExceptionGroup("step", [ExceptionGroup("inner", [lost]), fenced])) is lost
    # Anything else in the group is a real failure, not a quiet stop.
    assert fenced_off(ExceptionGroup("step", [fenced, ValueError("bug")])) is None
    assert fenced_off(ValueError("bug")) is None
