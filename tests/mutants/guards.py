"""Which behaviour tests guard each fenced statement and SQL function, and each found-it statement (I20):
the tests `make mutants` runs against each of its mutants. Declared, not found by coverage: a fence is
guarded by the tests written to break it (a take committed, or held open while the statement runs), a
found-it statement by its WAL test and the tests that make a commit vanish, and a test that merely passes
through a statement guards nothing."""

from __future__ import annotations

from tests.support.durable_rules import FOUND_IT

RUNS = "tests/integration/test_fence_runs.py"
JOBS = "tests/integration/test_fence_jobs.py"
LEADER = "tests/integration/test_fence_leader.py"
ENGINE = "tests/integration/test_fence_engine.py"
WORKFLOWS = "tests/integration/test_workflow_fencing.py"
INTERRUPTED = "tests/integration/test_interrupted_jobs.py"

VANISHING = "tests/integration/test_visible_not_durable.py"
FOUND_IT_WAITS = "tests/integration/test_found_it_waits.py"

_RAISED = "test_under_a_raised_attempt_the_statement_matches_nothing_and_writes_nothing"
_HELD = "test_a_statement_waiting_on_a_takeover_sees_its_attempt_once_it_commits"


def found_it(statement: str) -> list[str]:
    """The WAL test of one found-it statement: its found row made durable, its first insert paying nothing."""
    return [f"{FOUND_IT_WAITS}::test_a_found_row_is_made_durable_and_a_first_insert_pays_nothing[{statement}]"]


# The tests that make a commit vanish, by the found-it statements each goes through.
_KEPT_ANSWER = f"{VANISHING}::test_a_kept_answer_the_standby_lacks_is_not_replayed_and_the_retry_answers_again"
_RUN_BY_KEY = f"{VANISHING}::test_a_run_found_by_its_key_the_standby_lacks_is_not_answered_and_the_retry_makes_it_again"
_VANISHED = {"idempotency.get": [_KEPT_ANSWER], "runs.by_idempotency_key": [_RUN_BY_KEY],
             "runs.by_delegation_key": [_RUN_BY_KEY]}  # fmt: skip


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
    # I20: each found-it statement's durable() call (tests/support/durable_rules.py), and durable() itself.
    **{name: [*found_it(name), *_VANISHED.get(name, [])] for name in FOUND_IT},
    "fn:durable": [*found_it("idempotency.get"), *found_it("runs.by_delegation_key"), _KEPT_ANSWER, _RUN_BY_KEY],
}
