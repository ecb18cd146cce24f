"""When a cron schedule fires (values/schedules.py): next times in a zone, the DST rules, due fires and
the missed-fire policy, all without a database."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ticketiq.agents.catalog import DeclaredSchedule, parse
from ticketiq.errors import ConfigError
from ticketiq.settings import CRON_MISSED
from ticketiq.values.schedules import (
    ON_TIME_S,
    Cron,
    Missed,
    cron_problem,
    fire_times,
    latest_due,
    next_after,
    plan,
    zone_problem,
)

NY = "America/New_York"


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def walls(times: list[datetime], zone: str) -> list[str]:
    """Each fire as its zone's wall clock shows it, with the offset: 03-08 03:00-0400."""
    return [t.astimezone(ZoneInfo(zone)).strftime("%m-%d %H:%M%z") for t in times]


# ----- next times, in the schedule's zone, as UTC ----------------------------------------------------


def test_fire_times_are_wall_times_in_the_zone_returned_as_utc() -> None:
    weekdays = Cron("0 9 * * mon-fri", "Europe/Berlin")
    friday_noon = utc(2026, 1, 16, 11, 0)
    times = fire_times(weekdays, friday_noon, 2)
    assert times == [utc(2026, 1, 19, 8, 0), utc(2026, 1, 20, 8, 0)]  # Monday 09:00 CET is 08:00 UTC
    assert all(t.tzinfo is UTC for t in times)
    # In summer the same wall time is an hour earlier in UTC.
    assert next_after(weekdays, utc(2026, 7, 1, 12, 0)) == utc(2026, 7, 2, 7, 0)


def test_the_next_time_is_strictly_after_the_instant_even_on_a_fire_time() -> None:
    minutely = Cron("* * * * *", "UTC")
    assert next_after(minutely, utc(2026, 5, 1, 12, 0)) == utc(2026, 5, 1, 12, 1)
    assert next_after(minutely, utc(2026, 5, 1, 12, 0, 59)) == utc(2026, 5, 1, 12, 1)
    assert next_after(Cron("@hourly", "UTC"), utc(2026, 5, 1, 12, 0)) == utc(2026, 5, 1, 13, 0)
    # The instant may be given in any zone: the same instant, the same answer.
    tokyo = utc(2026, 5, 1, 12, 0).astimezone(ZoneInfo("Asia/Tokyo"))
    assert next_after(minutely, tokyo) == utc(2026, 5, 1, 12, 1)


# ----- DST: spring forward (a wall time that does not exist) -------------------------------------------


def test_a_fixed_hour_in_the_spring_forward_gap_fires_once_at_the_first_instant_after_the_gap() -> None:
    # 2026-03-08 in New York: 02:00 EST is followed by 03:00 EDT; 02:30 never happens.
    times = fire_times(Cron("30 2 * * *", NY), utc(2026, 3, 7, 12, 0), 3)
    assert walls(times, NY) == ["03-08 03:00-0400", "03-09 02:30-0400", "03-10 02:30-0400"]
    assert times[0] == utc(2026, 3, 8, 7, 0)
    # Four wall times in the gap, one fire.
    quarter = fire_times(Cron("*/15 2 * * *", NY), utc(2026, 3, 7, 12, 0), 2)
    assert walls(quarter, NY) == ["03-08 03:00-0400", "03-09 02:00-0400"]
    # Berlin, 2026-03-29: 02:00 CET is followed by 03:00 CEST.
    berlin = fire_times(Cron("30 2 * * *", "Europe/Berlin"), utc(2026, 3, 28, 12, 0), 2)
    assert walls(berlin, "Europe/Berlin") == ["03-29 03:00+0200", "03-30 02:30+0200"]


def test_a_wildcard_hour_has_no_fire_in_the_missing_hour_and_no_extra_one_after_it() -> None:
    hourly_at_half = fire_times(Cron("30 * * * *", NY), utc(2026, 3, 8, 5, 45), 2)
    assert walls(hourly_at_half, NY) == ["03-08 01:30-0500", "03-08 03:30-0400"]
    half_hourly = fire_times(Cron("*/30 * * * *", NY), utc(2026, 3, 8, 6, 15), 3)
    assert walls(half_hourly, NY) == ["03-08 01:30-0500", "03-08 03:00-0400", "03-08 03:30-0400"]


# ----- DST: fall back (a wall time that happens twice) ----------------------------------------------------


def test_a_wall_time_that_happens_twice_fires_once_at_its_first_pass() -> None:
    # 2026-11-01 in New York: 02:00 EDT is followed by 01:00 EST; 01:30 happens twice. croniter alone
    # would fire at 05:30 and 06:30 UTC.
    times = fire_times(Cron("30 1 * * *", NY), utc(2026, 10, 31, 12, 0), 2)
    assert walls(times, NY) == ["11-01 01:30-0400", "11-02 01:30-0500"]
    assert times[0] == utc(2026, 11, 1, 5, 30)


def test_a_frequent_schedule_pauses_for_the_repeated_hour_rather_than_fire_its_times_twice() -> None:
    half_hourly = fire_times(Cron("*/30 * * * *", NY), utc(2026, 11, 1, 4, 15), 4)
    assert walls(half_hourly, NY) == ["11-01 00:30-0400", "11-01 01:00-0400", "11-01 01:30-0400", "11-01 02:00-0500"]
    hourly = fire_times(Cron("0 * * * *", NY), utc(2026, 11, 1, 4, 15), 2)
    assert hourly == [utc(2026, 11, 1, 5, 0), utc(2026, 11, 1, 7, 0)]  # 01:00 EDT, then 02:00 EST


def test_from_inside_the_repeated_hour_its_second_pass_is_not_a_fire_time() -> None:
    during_second_pass = utc(2026, 11, 1, 6, 10)  # 01:10 EST
    assert walls([next_after(Cron("30 1 * * *", NY), during_second_pass)], NY) == ["11-02 01:30-0500"]


def test_a_zone_whose_summer_is_its_standard_time_still_fires_a_repeated_wall_time_once() -> None:
    # Europe/Dublin: IST is standard time and winter is a negative DST; 01:30 happens twice on 2026-10-25.
    times = fire_times(Cron("30 1 * * *", "Europe/Dublin"), utc(2026, 10, 24, 12, 0), 2)
    assert times == [utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)]


DST_ZONES = ["America/New_York", "Europe/Berlin", "Europe/Dublin", "Australia/Lord_Howe", "America/Santiago", "UTC"]
# Instants within two days of a clock change of one of the zones above (2026), where the rules bite.
CHANGES = [utc(2026, 3, 8, 7), utc(2026, 11, 1, 6), utc(2026, 3, 29, 1), utc(2026, 10, 25, 1), utc(2026, 4, 4, 15),
           utc(2026, 10, 3, 15), utc(2026, 4, 5, 3), utc(2026, 9, 6, 4)]  # fmt: skip
near_a_change = st.builds(
    lambda change, minutes: change + timedelta(minutes=minutes),
    st.sampled_from(CHANGES),
    st.integers(min_value=-2 * 24 * 60, max_value=2 * 24 * 60),
)
EXPRESSIONS = ["* * * * *", "*/7 * * * *", "30 1 * * *", "30 2 * * *", "0 * * * *", "15,45 0-3 * * *", "@hourly"]


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from(DST_ZONES),
    expression=st.sampled_from(EXPRESSIONS),
    start=near_a_change,
)
def test_fire_times_rise_strictly_exist_and_never_repeat_a_wall_time(
    zone: str, expression: str, start: datetime
) -> None:
    times = fire_times(Cron(expression, zone), start, 30)
    assert times[0] > start
    assert all(a < b for a, b in itertools.pairwise(times))
    tz = ZoneInfo(zone)
    shown = [t.astimezone(tz).replace(tzinfo=None) for t in times]
    assert len(set(shown)) == len(shown)  # no wall time fires twice
    for t, wall in zip(times, shown, strict=True):
        passes = [wall.replace(fold=fold, tzinfo=tz).astimezone(UTC) for fold in (0, 1)]
        assert passes[0].astimezone(tz).replace(tzinfo=None) == wall  # a wall time that exists
        assert t == min(passes)  # at its first pass


# ----- due fires -----------------------------------------------------------------------------------


def test_the_latest_due_time_is_the_last_fire_time_in_first_to_now() -> None:
    minutely = Cron("* * * * *", "UTC")
    now = utc(2026, 5, 1, 12, 0, 30)
    assert latest_due(minutely, utc(2026, 5, 1, 12, 0), now) == utc(2026, 5, 1, 12, 0)
    assert latest_due(minutely, utc(2026, 5, 1, 12, 1), now) is None  # not yet
    # A month of a minutely schedule's missed times: found by looking back, not walked one by one.
    assert latest_due(minutely, now - timedelta(days=30), now) == utc(2026, 5, 1, 12, 0)
    # A yearly schedule missed for years.
    assert latest_due(Cron("0 0 1 1 *", "UTC"), utc(2020, 1, 1), now) == utc(2026, 1, 1)
    # A `first` that is no fire time of the expression (moved by hand): only real fire times count.
    assert latest_due(Cron("0 12 * * *", "UTC"), utc(2026, 5, 1, 11, 59), utc(2026, 5, 1, 11, 59, 30)) is None


@settings(max_examples=60, deadline=None)
@given(
    zone=st.sampled_from(DST_ZONES),
    expression=st.sampled_from(EXPRESSIONS),
    start=near_a_change,
    span_min=st.integers(min_value=0, max_value=24 * 60),
)
def test_the_latest_due_time_is_what_walking_every_fire_time_finds(
    zone: str, expression: str, start: datetime, span_min: int
) -> None:
    cron = Cron(expression, zone)
    first = next_after(cron, start)
    now = first + timedelta(minutes=span_min, seconds=17)
    walked, at = None, first
    while at <= now:
        walked, at = at, next_after(cron, at)
    assert latest_due(cron, first, now) == walked


# ----- the missed-fire policy -------------------------------------------------------------------------

HOURLY = Cron("0 * * * *", "UTC")


@pytest.mark.parametrize("missed", list(Missed))
def test_a_fire_found_on_time_fires_under_either_policy(missed: Missed) -> None:
    now = utc(2026, 5, 1, 12, 0, 5)  # a leader failover later: still on time
    planned = plan(HOURLY, utc(2026, 5, 1, 12, 0), now, missed)
    assert planned.fires == (utc(2026, 5, 1, 12, 0),)
    assert (planned.skipped, planned.next_fire_at, planned.dropped) == ((), utc(2026, 5, 1, 13, 0), False)
    late = plan(HOURLY, utc(2026, 5, 1, 12, 0), utc(2026, 5, 1, 12, 0) + timedelta(seconds=ON_TIME_S), missed)
    assert late.fires == (utc(2026, 5, 1, 12, 0),)  # the bound itself is on time


def test_missed_times_under_latest_fire_once_for_the_latest_of_them() -> None:
    # Every process was down from 09:00 to 12:10: 09:00, 10:00, 11:00 and 12:00 passed.
    planned = plan(HOURLY, utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 12, 10), Missed.LATEST)
    assert planned.fires == (utc(2026, 5, 1, 12, 0),)
    assert planned.skipped == ()
    assert planned.next_fire_at == utc(2026, 5, 1, 13, 0)
    assert planned.dropped


def test_missed_times_under_skip_fire_none_and_go_on_from_the_next_future_time() -> None:
    planned = plan(HOURLY, utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 12, 10), Missed.SKIP)
    assert planned.fires == ()
    assert planned.skipped == (utc(2026, 5, 1, 12, 0),)  # recorded as skipped, never fired
    assert planned.next_fire_at == utc(2026, 5, 1, 13, 0)
    # Earlier times that passed while on time was still possible are dropped too: only the latest counts.
    on_time = plan(HOURLY, utc(2026, 5, 1, 9, 0), utc(2026, 5, 1, 12, 0, 30), Missed.SKIP)
    assert (on_time.fires, on_time.dropped) == ((utc(2026, 5, 1, 12, 0),), True)


@pytest.mark.parametrize("missed", list(Missed))
def test_a_schedule_not_yet_due_fires_nothing_and_keeps_its_next_time(missed: Missed) -> None:
    planned = plan(HOURLY, utc(2026, 5, 1, 13, 0), utc(2026, 5, 1, 12, 10), missed)
    assert (planned.fires, planned.skipped, planned.next_fire_at) == ((), (), utc(2026, 5, 1, 13, 0))


def test_the_policy_names_are_the_settings() -> None:
    assert tuple(m.value for m in Missed) == CRON_MISSED


# A fire's run key: tests/unit/test_run_keys.py (engine/run_keys.py makes every run key).


# ----- what is refused ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("* * * * * *", "five fields"),  # croniter would read a sixth field as seconds
        ("* * *", "five fields"),
        ("", "five fields"),
        ("@reboot", "five fields"),
        ("61 * * * *", "not a valid cron expression"),
        ("0 0 30 2 *", "names no time that exists"),
        ("R * * * *", "not supported"),  # random: two leaders would pick different times
        ("H/5 * * * *", "not supported"),
    ],
)
def test_an_expression_that_is_not_five_real_fields_is_refused_saying_why(expression: str, why: str) -> None:
    problem = cron_problem(expression)
    assert problem is not None and why in problem


@pytest.mark.parametrize("expression", ["* * * * *", "0 9 * * mon-fri", "*/5 0-6 1,15 * *", "0 0 L * *", "@daily"])
def test_cron_expressions_are_taken(expression: str) -> None:
    assert cron_problem(expression) is None


def test_only_iana_zone_names_are_taken() -> None:
    for name in ("UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata"):
        assert zone_problem(name) is None
    for name in ("Mars/Olympus", "localtime", "right/UTC", "../etc/passwd", "", "CEST"):
        assert zone_problem(name) is not None, name


# ----- schedules the agents file declares ---------------------------------------------------------------

AGENTS = {"triage": {"system_prompt": "You triage.", "owner": "ops"}}


def test_the_agents_file_declares_schedules_checked_as_the_api_checks_them() -> None:
    data = {"agents": AGENTS, "schedules": [
        {"name": "morning", "agent": "triage", "cron": " 0 9 * * mon-fri ", "timezone": NY, "input": "Triage OPS"},
        {"name": "hourly", "agent": "triage", "cron": "@hourly", "input": "Look"},
    ]}  # fmt: skip
    declared = parse(data, "agents.yaml").schedules
    assert declared == (
        DeclaredSchedule("morning", "triage", "0 9 * * mon-fri", NY, "Triage OPS"),
        DeclaredSchedule("hourly", "triage", "@hourly", "UTC", "Look"),  # the zone defaults to UTC
    )
    assert parse({"agents": AGENTS}, "agents.yaml").schedules == ()


@pytest.mark.parametrize(
    ("schedule", "why"),
    [
        ({"agent": "triage", "cron": "* * * * *", "input": "x"}, "`name` is required"),
        ({"name": "a", "agent": "nobody", "cron": "* * * * *", "input": "x"}, "no agent named 'nobody'"),
        ({"name": "a", "agent": "triage", "cron": "* * * * * *", "input": "x"}, r"schedules\[0\] \(a\): a cron"),
        ({"name": "a", "agent": "triage", "cron": "* * * * *", "timezone": "Mars/X", "input": "x"}, "IANA"),
        ({"name": "a", "agent": "triage", "cron": "* * * * *", "input": "x", "every": "day"}, "unknown fields"),
    ],
)
def test_a_bad_declared_schedule_is_refused_at_start_saying_which_and_why(schedule: dict[str, str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse({"agents": AGENTS, "schedules": [schedule]}, "agents.yaml")


def test_a_schedule_name_declared_twice_is_refused() -> None:
    twice = [{"name": "a", "agent": "triage", "cron": "@daily", "input": "x"}] * 2
    with pytest.raises(ConfigError, match="declared twice"):
        parse({"agents": AGENTS, "schedules": twice}, "agents.yaml")
