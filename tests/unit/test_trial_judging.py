"""How a kill trial is judged (tests/support/trials.py): lost, duplicates, caught in flight, recovery,
and the tally's pass rule. The harness's verdicts are only as good as these rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.trials import Observed, Tally, Trial, judge, percentile

KILL = datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC)


def seen(**changes: object) -> Observed:
    base: dict[str, object] = {
        "run_status": "succeeded", "losses": 1, "created_at": KILL - timedelta(seconds=1),
        "finished_at": KILL + timedelta(seconds=2.5), "ended": True, "incidents": 1, "comments": 1,
        "agent_replies": 1, "turn_replies": 1,
    }  # fmt: skip
    base.update(changes)
    return Observed(**base)  # type: ignore[arg-type]


def test_a_trial_taken_over_and_finished_once_is_caught_in_flight_and_recovered() -> None:
    verdict = judge(Trial("teams", 7, 0, "a-7"), seen(), KILL)
    assert (verdict.lost, verdict.duplicates, verdict.in_flight) == (None, (), True)
    assert verdict.recovery_s == 2.5 and not verdict.failed


def test_lost_when_its_record_never_reaches_its_end() -> None:
    assert judge(Trial("webhook", 1, 0, "d"), seen(run_status=None), KILL).lost == "no run was made for it"
    assert judge(Trial("webhook", 1, 0, "d"), seen(run_status="failed"), KILL).lost == "its run ended failed"
    assert judge(Trial("cron", 1, 0, "s"), seen(ended=False), KILL).lost == "the fire's outcome was never recorded"
    assert judge(Trial("teams", 1, 0, "a"), seen(ended=False), KILL).lost == "the turn ended with no reply"
    missing = judge(Trial("teams", 1, 0, "a"), seen(incidents=0, turn_replies=0), KILL)
    assert missing.lost == "succeeded without its incident, turn reply" and missing.failed


def test_each_write_applied_twice_is_a_duplicate() -> None:
    verdict = judge(Trial("teams", 1, 0, "a"), seen(incidents=2, comments=3, agent_replies=2, turn_replies=2), KILL)
    assert verdict.duplicates == (
        "2 incidents from one create", "Jira comment sent 3 times", "ops-thread reply posted 2 times",
        "Teams turn reply posted 2 times",
    )  # fmt: skip
    assert verdict.lost is None and verdict.failed
    # A webhook trial has no turn of its own: replies in other threads are not its duplicates.
    assert judge(Trial("webhook", 1, 0, "d"), seen(turn_replies=2), KILL).duplicates == ()


def test_caught_only_when_taken_over_or_cut_unless_the_event_met_every_process() -> None:
    on_the_survivor = seen(losses=0)  # ran across the kill, but on the process that was not killed
    assert not judge(Trial("cron", 1, 0, "s"), on_the_survivor, KILL).in_flight
    assert judge(Trial("cron", 1, 0, "s"), on_the_survivor, KILL, spanning=True).in_flight
    cut = Trial("webhook", 1, 0, "d", interrupted=True)
    assert judge(cut, seen(losses=0), KILL).in_flight
    done_before = seen(losses=0, finished_at=KILL - timedelta(seconds=0.1))
    verdict = judge(Trial("cron", 1, 0, "s"), done_before, KILL, spanning=True)
    assert not verdict.in_flight and verdict.recovery_s is None


def test_a_recovery_over_fifteen_seconds_fails_the_trial() -> None:
    slow = judge(Trial("webhook", 1, 0, "d"), seen(finished_at=KILL + timedelta(seconds=15.5)), KILL)
    assert slow.lost is None and slow.duplicates == () and slow.failed
    tally = Tally()
    tally.add_round([slow])
    assert tally.failures == ["round 0 webhook OPS-1: recovered in 15.50 s (over 15 s)"] and not tally.passed


def test_the_tally_needs_half_the_trials_in_flight() -> None:
    tally = Tally()
    caught = judge(Trial("teams", 1, 0, "a"), seen(), KILL)
    missed = judge(Trial("cron", 2, 0, "s"), seen(losses=0), KILL)
    tally.add_round([caught, missed, missed])
    assert (tally.trials, tally.in_flight, tally.rounds_in_flight) == (3, 1, 1)
    assert not tally.enough_in_flight() and not tally.passed
    tally.add_round([caught, caught])
    assert tally.enough_in_flight() and tally.passed
    assert tally.by_kind()["cron"] == {"trials": 2, "in_flight": 0, "lost": 0, "duplicates": 0}


def test_percentiles_are_measured_values() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 95), percentile(values, 99)) == (50.0, 95.0, 99.0)
    assert percentile([3.0], 99) == 3.0 and percentile([], 50) == 0.0
