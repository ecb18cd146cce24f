"""A model step's times in the transcript: the start to the microsecond, the model call's length to the
microsecond in milliseconds: within a place of the clock's reading and of what round() gives."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ticketiq.engine import transcript

EPOCHS = st.floats(min_value=1.6e9, max_value=4.1e9, allow_nan=False)
LENGTHS = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)


@given(EPOCHS, LENGTHS, st.integers(min_value=1, max_value=1000))
def test_a_steps_times_are_its_clocks_to_the_microsecond(started_at: float, model_s: float, attempt: int) -> None:
    timed = transcript.model_answer(3, 10, transcript.Timing(attempt, started_at, model_s))["body"]
    assert timed["attempt"] == attempt
    # A microsecond, and the double's own spacing near an epoch time (2**-21 s below 2**32).
    assert abs(timed["started_at"] - started_at) <= 1e-6 + 2**-21
    assert abs(timed["started_at"] - round(started_at, 6)) <= 1e-6 + 2**-21
    assert abs(timed["model_ms"] - model_s * 1000.0) <= 1e-3
    assert abs(timed["model_ms"] - round(model_s * 1000.0, 3)) <= 1e-3 + 1e-9


def test_times_with_no_more_places_than_kept_are_kept_as_they_are() -> None:
    timed = transcript.model_answer(1, 0, transcript.Timing(2, 1765000000.25, 0.0125))["body"]
    assert timed["started_at"] == 1765000000.25
    assert timed["model_ms"] == 12.5
