"""How a kill trial is judged (tests/support/trials.py): lost, duplicates, caught in flight, recovery,
and the tally's pass rule. The harness's verdicts are only as good as these rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.trials import (
    DEFAULT_MIX,
    MODE_MIX,
    JobSeen,
    Observed,
    Tally,
    Trial,
    judge,
    parse_mix,
    percentile,
)

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


def test_a_run_handed_over_by_a_process_stopping_cleanly_is_caught() -> None:
    # A roll's SIGTERM: the run goes on elsewhere under a new attempt, no loss counted, its request not cut.
    handed = seen(losses=0, handed=1, created_at=KILL + timedelta(seconds=1))  # begun after the event
    verdict = judge(Trial("webhook", 1, 0, "d"), handed, KILL)
    assert verdict.in_flight and verdict.recovery_s == 2.5
    assert not judge(Trial("webhook", 1, 0, "d"), seen(losses=0, handed=0), KILL).in_flight


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


def job_seen(**changes: object) -> JobSeen:
    """A job trial taken over once and finished with everything there exactly once."""
    base: dict[str, object] = {
        "status": "succeeded", "jobs": 1, "losses": 1, "created_at": KILL - timedelta(seconds=1),
        "finished_at": KILL + timedelta(seconds=4), "generated": 300, "rows": 300, "keys": 300,
        "result_issues": 300, "comment_steps": 2, "comments": 2, "most_per_key": 1, "most_per_text": 1,
    }  # fmt: skip
    base.update(changes)
    return JobSeen(**base)  # type: ignore[arg-type]


def test_the_mix_is_the_default_or_known_kinds_each_once() -> None:
    assert parse_mix(None) == parse_mix("  ") == DEFAULT_MIX == ("cron", "teams", "webhook", "mcp")
    assert parse_mix("sync, workflow") == ("sync", "workflow")
    assert parse_mix("cron,teams,webhook,sync,workflow") == ("cron", "teams", "webhook", "sync", "workflow")
    assert parse_mix("mcp") == ("mcp",)
    with pytest.raises(
        ValueError, match=r"LIYAGENT_KILL_MIX .*unknown trial kind 'syncs'.*cron, teams, webhook, mcp, sync, workflow"
    ):
        parse_mix("cron,syncs")
    with pytest.raises(ValueError, match=r"LIYAGENT_KILL_MIX .*unknown trial kind ','"):
        parse_mix(",")
    with pytest.raises(ValueError, match=r"LIYAGENT_KILL_MIX .*'sync' twice"):
        parse_mix("sync,cron,sync")


def test_a_sync_taken_over_and_complete_is_caught_and_recovered() -> None:
    trial = Trial("sync", 1003, 2, "job-id")
    verdict = judge(trial, job_seen(), KILL)
    assert (verdict.lost, verdict.duplicates, verdict.in_flight, verdict.recovery_s) == (None, (), True, 4.0)
    assert trial.subject == "SYNC1003"
    # Run wholly on the survivor and not cut: not caught, whatever the rows say.
    assert not judge(trial, job_seen(losses=0), KILL).in_flight
    assert judge(Trial("sync", 1003, 2, "", interrupted=True), job_seen(losses=0), KILL).in_flight


def test_a_sync_is_lost_unless_it_succeeded_with_every_issue() -> None:
    trial = Trial("sync", 1, 0, "j")
    assert judge(trial, job_seen(status=None), KILL).lost == "no job was made for it"
    assert judge(trial, job_seen(status="interrupted"), KILL).lost == "its job ended interrupted"
    assert judge(trial, job_seen(status="queued", finished_at=None), KILL).lost == "its job never ended (queued)"
    assert judge(trial, job_seen(rows=290, keys=290), KILL).lost == (
        "succeeded with 290 of the project's 300 issues in the knowledge table"
    )
    assert judge(trial, job_seen(result_issues=280), KILL).lost == (
        "succeeded saying it imported 280 of the project's 300 issues"
    )


def test_a_sync_that_imported_anything_twice_or_ran_twice_is_a_duplicate() -> None:
    trial = Trial("sync", 1, 0, "j")
    assert judge(trial, job_seen(jobs=2), KILL).duplicates == ("its one request made 2 jobs",)
    assert judge(trial, job_seen(rows=301, keys=300), KILL).duplicates == (
        "1 issues stored twice", "301 knowledge rows for 300 issues",
    )  # fmt: skip
    # A page written again after a resume counts its issues twice in the cursor the result comes from.
    assert judge(trial, job_seen(result_issues=310), KILL).duplicates == ("its result says 310 issues imported of 300",)
    # The workflow's fields mean nothing for a sync.
    assert judge(trial, job_seen(comments=5, most_per_key=3), KILL).duplicates == ()


def test_a_workflow_is_lost_without_a_comment_for_each_comment_step() -> None:
    trial = Trial("workflow", 7, 0, "j")
    assert judge(trial, job_seen(), KILL).lost is None
    assert judge(trial, job_seen(status="failed"), KILL).lost == "its job ended failed"
    assert judge(trial, job_seen(comments=1), KILL).lost == "1 of its 2 comments applied at Jira"
    assert judge(trial, job_seen(comment_steps=0, comments=0), KILL).lost == "succeeded without a comment step"
    # The sync's fields mean nothing for a workflow.
    assert judge(trial, job_seen(rows=0, result_issues=0), KILL).lost is None


def test_a_workflow_comment_applied_twice_is_a_duplicate() -> None:
    trial = Trial("workflow", 7, 0, "j")
    assert judge(trial, job_seen(comments=3, most_per_key=2, most_per_text=2), KILL).duplicates == (
        "a comment applied 2 times under one step key", "one comment text applied 2 times",
        "3 comments applied for 2 comment steps executed",
    )  # fmt: skip
    # Two jobs from one request: each comment sent under its own job's keys, but the same text twice.
    twice = judge(trial, job_seen(jobs=2, comment_steps=4, comments=4, most_per_text=2), KILL)
    assert twice.duplicates == ("its one request made 2 jobs", "one comment text applied 2 times")


def test_the_tally_counts_and_times_each_kind_of_the_mix() -> None:
    tally = Tally()
    sync = judge(Trial("sync", 5, 0, "j"), job_seen(rows=299, keys=299), KILL)
    flow = judge(Trial("workflow", 6, 0, "j"), job_seen(finished_at=KILL + timedelta(seconds=9)), KILL)
    tally.add_round([sync, flow])
    assert tally.failures == ["round 0 sync SYNC5: lost, succeeded with 299 of the project's 300 issues in the "
                              "knowledge table"]  # fmt: skip
    assert tally.by_kind() == {
        "sync": {"trials": 1, "in_flight": 1, "lost": 1, "duplicates": 0},
        "workflow": {"trials": 1, "in_flight": 1, "lost": 0, "duplicates": 0},
    }  # fmt: skip
    assert tally.recovery_by_kind()["workflow"]["max"] == 9.0 and tally.recovery_by_kind()["sync"]["p50"] == 4.0
    assert tally.summary()["max"] == 9.0


def mcp_seen(**changes: object) -> Observed:
    """An MCP (noter) run taken over once and finished: its add_note recorded done and applied once, its
    set_note applied and the status note reading what it sent. It triages nothing."""
    base: dict[str, object] = {
        "run_status": "succeeded", "losses": 1, "created_at": KILL - timedelta(seconds=1),
        "finished_at": KILL + timedelta(seconds=2), "ended": True, "incidents": 0, "comments": 0,
        "agent_replies": 0, "turn_replies": 0, "runs": 1, "adds": 1, "sets": 1, "add_done": True,
        "status_note": "noted",
    }  # fmt: skip
    base.update(changes)
    return Observed(**base)  # type: ignore[arg-type]


def test_an_mcp_run_taken_over_with_each_write_once_is_caught_and_recovered() -> None:
    trial = Trial("mcp", 11, 0, "run-id")
    verdict = judge(trial, mcp_seen(), KILL)
    assert (verdict.lost, verdict.duplicates, verdict.in_flight, verdict.recovery_s) == (None, (), True, 2.0)
    assert trial.subject == "OPS-11" and not verdict.failed
    # It opens no incident and comments nowhere: those are triage's writes, not missing here.
    assert judge(trial, mcp_seen(incidents=0, comments=0, agent_replies=0), KILL).lost is None


def test_an_mcp_run_is_lost_unless_it_succeeded() -> None:
    trial = Trial("mcp", 11, 0, "run-id")
    assert judge(trial, mcp_seen(run_status=None), KILL).lost == "no run was made for it"
    assert judge(trial, mcp_seen(run_status="failed"), KILL).lost == "its run ended failed"
    assert judge(trial, mcp_seen(ended=False), KILL).lost == "its record never reached its end"


def test_an_mcp_add_note_its_calls_say_was_done_must_have_landed() -> None:
    trial = Trial("mcp", 11, 0, "run-id")
    assert judge(trial, mcp_seen(adds=0), KILL).lost == (
        "its calls say add_note was done, but no add_note was applied for its notebook"
    )
    # Left in doubt by the event: settled unknown, never sent again; landed or not, nothing is lost or doubled.
    for adds in (0, 1):
        verdict = judge(trial, mcp_seen(add_done=False, adds=adds), KILL)
        assert (verdict.lost, verdict.duplicates) == (None, ())


def test_an_mcp_status_note_must_read_what_set_note_sent() -> None:
    trial = Trial("mcp", 11, 0, "run-id")
    assert judge(trial, mcp_seen(sets=0, status_note=None), KILL).lost == "succeeded without its set_note applied"
    assert judge(trial, mcp_seen(status_note="draft"), KILL).lost == "its status note reads 'draft', not 'noted'"


def test_an_mcp_add_note_applied_twice_is_a_duplicate_but_set_note_sent_again_is_not() -> None:
    trial = Trial("mcp", 11, 0, "run-id")
    verdict = judge(trial, mcp_seen(adds=2), KILL)
    assert verdict.duplicates == ("MCP add_note applied 2 times",) and verdict.failed
    # Unknown yet applied twice is still twice: the engine must never have sent it again.
    assert judge(trial, mcp_seen(adds=3, add_done=False), KILL).duplicates == ("MCP add_note applied 3 times",)
    # set_note is an idempotent write, resent with the same arguments on purpose: the note reads right.
    resent = judge(trial, mcp_seen(sets=3), KILL)
    assert (resent.lost, resent.duplicates, resent.failed) == (None, (), False)
    assert judge(trial, mcp_seen(runs=2), KILL).duplicates == ("its one request made 2 runs",)


def test_the_mcp_kind_is_in_every_mix_the_modes_run_and_counted_apart() -> None:
    assert "mcp" in DEFAULT_MIX and all("mcp" in mix for mix in MODE_MIX.values())
    tally = Tally()
    twice = judge(Trial("mcp", 11, 4, "r"), mcp_seen(adds=2, finished_at=KILL + timedelta(seconds=3)), KILL)
    tally.add_round([twice, judge(Trial("cron", 12, 4, "s"), seen(), KILL)])
    assert tally.failures == ["round 4 mcp OPS-11: duplicate, MCP add_note applied 2 times"]
    assert tally.kinds() == ["cron", "mcp"]
    assert tally.by_kind()["mcp"] == {"trials": 1, "in_flight": 1, "lost": 0, "duplicates": 1}
    assert tally.recovery_by_kind()["mcp"]["max"] == 3.0
