"""Which behaviour tests guard each fenced statement and SQL function: the tests `make mutants` runs
against each of its mutants. Declared, not found by coverage: a fence is guarded by the tests written to
break it (a take committed, or held open while the statement runs), and a test that merely passes
through a statement guards nothing."""

from __future__ import annotations

RUNS = "tests/integration/test_fence_runs.py"
JOBS = "tests/integration/test_fence_jobs.py"
LEADER = "tests/integration/test_fence_leader.py"
ENGINE = "tests/integration/test_fence_engine.py"
WORKFLOWS = "tests/integration/test_workflow_fencing.py"
INTERRUPTED = "tests/integration/test_interrupted_jobs.py"

_RAISED = "test_under_a_raised_attempt_the_statement_matches_nothing_and_writes_nothing"
_HELD = "test_a_statement_waiting_on_a_takeover_sees_its_attempt_once_it_commits"


def fenced(module: str, statement: str, held: bool = True) -> list[str]:
    """The parametrized fence tests of one statement: the raised attempt, and the take held open."""
    return [f"{module}::{_RAISED}[{statement}]", *([f"{module}::{_HELD}[{statement}]"] if held else [])]


GUARDS: dict[str, list[str]] = {
    "runs.write_checkpoint_only": [
        *fenced(RUNS, "runs.write_checkpoint_only"),
        f"{ENGINE}::test_a_read_only_step_under_a_raised_attempt_makes_no_call",
        f"{ENGINE}::test_a_read_only_step_whose_checkpoint_waits_on_a_takeover_makes_no_more_calls",
    ],
    "runs.hand_on": fenced(RUNS, "runs.hand_on"),
    "runs.fail": fenced(RUNS, "runs.fail"),
    "runs.audit": fenced(RUNS, "runs.audit"),
    "runs.lock": [f"{RUNS}::test_a_decision_landing_while_the_run_suspends_wakes_it"],
    "calls.mark_in_doubt": [
        *fenced(RUNS, "calls.mark_in_doubt"),
        f"{ENGINE}::test_a_zombie_whose_mark_waits_on_a_takeover_sends_no_write",
    ],
    "calls.record_outcome": [
        *fenced(RUNS, "calls.record_outcome"),
        f"{ENGINE}::test_a_write_whose_outcome_comes_back_after_a_takeover_records_nothing",
        f"{ENGINE}::test_a_write_whose_outcome_waits_on_a_takeover_records_nothing",
    ],
    "calls.reopen_uncertain": fenced(RUNS, "calls.reopen_uncertain"),
    "calls.record_reference": fenced(RUNS, "calls.record_reference"),
    "approvals.file": [
        *fenced(RUNS, "approvals.file"),
        f"{ENGINE}::test_an_approval_filed_while_a_takeover_commits_is_not_filed_and_nothing_is_sent",
    ],
    "schedules.record_outcome": fenced(RUNS, "schedules.record_outcome"),
    # seal_checkpoint fences every statement that writes a sealed checkpoint but the read-only step's.
    "fn:seal_checkpoint": [
        *fenced(RUNS, "runs.write_checkpoint"),
        *fenced(RUNS, "runs.end"),
        *fenced(RUNS, "runs.answered"),
        *fenced(RUNS, "runs.suspend"),
    ],
    "leader.hand_back": [
        f"{LEADER}::test_a_hand_back_queues_only_a_run_held_under_the_attempt_it_names",
        f"{LEADER}::test_a_hand_back_waiting_on_a_take_sees_its_attempt_once_it_commits",
    ],
    "leader.drain": [
        f"{LEADER}::test_a_drain_gives_back_only_a_run_given_under_its_current_attempt",
        f"{LEADER}::test_a_drain_waiting_on_a_raise_sees_it_once_it_commits",
    ],
    "leases.take_up": [
        f"{LEADER}::test_a_run_given_under_one_attempt_is_never_taken_up_under_a_later_one",
        f"{LEADER}::test_a_run_being_taken_meanwhile_is_not_taken_up",
    ],
    # job_holds (migration 025) fences every statement a running job makes about itself: its attempt
    # (a statement that writes, and one that reads its fence under a lock before it writes) and its
    # `running` (a job the sweep interrupted keeps its attempt).
    "fn:job_holds": [
        *fenced(JOBS, "jobs.save"),
        *fenced(JOBS, "knowledge.sync_page"),
        f"{INTERRUPTED}::test_a_fenced_write_under_an_old_attempt_writes_nothing",
        f"{INTERRUPTED}::test_a_fenced_write_waiting_on_the_sweep_sees_the_job_interrupted",
    ],
    "jobs.save": fenced(JOBS, "jobs.save"),
    "jobs.finish": fenced(JOBS, "jobs.finish"),
    "jobs.hand_back": fenced(JOBS, "jobs.hand_back"),
    "jobs.unclaim": fenced(JOBS, "jobs.unclaim"),
    "knowledge.sync_page": fenced(JOBS, "knowledge.sync_page"),
    "fine_tune.mark_in_doubt": fenced(JOBS, "fine_tune.mark_in_doubt"),
    "fine_tune.clock": fenced(JOBS, "fine_tune.clock", held=False),
    "classifiers.record": fenced(JOBS, "classifiers.record"),
    "red_team.record_answer": fenced(JOBS, "red_team.record_answer"),
    "workflows.step_begun": [
        f"{WORKFLOWS}::test_a_statement_under_a_raised_attempt_matches_nothing_and_writes_nothing",
        f"{WORKFLOWS}::test_a_statement_waiting_on_a_takeover_matches_nothing_once_it_commits",
    ],
    "workflows.step_ended": [
        f"{WORKFLOWS}::test_a_statement_under_a_raised_attempt_matches_nothing_and_writes_nothing",
        f"{WORKFLOWS}::test_a_statement_waiting_on_a_takeover_matches_nothing_once_it_commits",
    ],
    "workflows.in_flight_for": [
        f"{WORKFLOWS}::test_a_statement_under_a_raised_attempt_matches_nothing_and_writes_nothing",
    ],
}
