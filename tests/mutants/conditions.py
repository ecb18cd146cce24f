"""Mutants of conditions that are not attempt fences, declared by hand with the tests that guard them:
each drops one conjunct an invariant rests on (`make mutants` runs them beside the fence mutants)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.fence_rules import Mutant
from tests.support.fences import Span

QUERIES = Path(__file__).resolve().parents[2] / "src" / "ticketiq" / "storage" / "queries"
RETAKEN = "tests/integration/test_mark_retaken.py"
BORN = "tests/integration/test_born_taken.py"
FORMATS = "tests/integration/test_checkpoint_formats.py"
FORMATS_MIGRATION = "migrations/031_checkpoint_formats.sql"
DELEGATION = "tests/integration/test_delegation_authority.py"
AUTHORITY_MIGRATION = "migrations/032_starter_authority.sql"
WITHDRAWN = "tests/integration/test_withdrawn_approvals.py"
_ENDS = "test_the_statement_that_ends_a_run_withdraws_its_pending_request_and_only_that"
STREAMS = "tests/integration/test_event_stream_limits.py"

# (statement, the conjunct as written in it, what it becomes, the guard tests)
DECLARED: list[tuple[str, str, str, list[str]]] = [
    # The retake re-checks, under the row lock a claim of the process took, that the process was not
    # ended meanwhile: without it an identity found dead is taken again.
    ("leader.retake", "AND p.ended_at IS NULL", "",
     [f"{RETAKEN}::test_the_retake_matches_nothing_when_a_claim_ended_the_process_under_it"]),
    # The retake gives up every lease the identity held: kept, a lease of a run no driver here drives
    # waits out its TTL (and the run with it) instead of being claimed at once.
    ("leader.retake", "UPDATE leases l SET expires_at = least(l.expires_at, now() - interval '1 millisecond')",
     "UPDATE leases l SET expires_at = l.expires_at",
     [f"{RETAKEN}::test_the_retake_keeps_the_identity_and_gives_its_leases_up_to_the_sweep"]),
    # It passes by a lease another transaction holds (the sweep claiming it): waiting on it while it holds
    # the process row deadlocked with a sweep waiting on that row.
    ("leader.retake", "FOR UPDATE SKIP LOCKED", "FOR UPDATE",
     [f"{RETAKEN}::test_the_retake_passes_by_a_lease_the_sweep_holds_instead_of_waiting_on_it"]),
    # A run born taken (issue 19) must leave what a take leaves. Its lease born lapsed: the sweep claims a
    # run its maker still drives.
    ("runs.create_taken", "now() + make_interval(secs => %(ttl)s)", "now()",
     [f"{BORN}::test_a_run_born_taken_is_held_by_its_maker_and_no_sweep_claims_it"]),
    # Its lease held by nobody of this process: the renewals miss it and the run is taken over.
    ("runs.create_taken", "'checkpoint:' || run.id::text, %(holder)s", "'checkpoint:' || run.id::text, 'nobody'",
     [f"{BORN}::test_a_run_born_taken_is_held_by_its_maker_and_no_sweep_claims_it"]),
    # Its attempt's row not opened: the timeline shows an attempt nobody made.
    ("runs.create_taken", "SELECT run.id, 1, %(holder)s FROM run", "SELECT run.id, 1, %(holder)s FROM run WHERE false",
     [f"{BORN}::test_a_run_born_taken_is_held_by_its_maker_and_no_sweep_claims_it"]),
    # A repeated key: nothing made, no error (the first request's run is answered).
    ("runs.create_taken", "ON CONFLICT DO NOTHING", "",
     [f"{BORN}::test_a_repeated_key_makes_nothing_and_finds_the_run_born_with_its_status"]),
    # The status the run was born with, which a repeat is answered with.
    ("runs.create_taken", "jsonb_build_object('status', run.status)", "'{}'::jsonb",
     [f"{BORN}::test_a_repeated_key_makes_nothing_and_finds_the_run_born_with_its_status"]),
    # Versioned checkpoints (migration 031): a take for a process that cannot read the checkpoint takes
    # nothing. Without the guard the previous release's acquire takes a newer release's run.
    (f"{FORMATS_MIGRATION}:take_run", "         WHERE knows_checkpoint(p_holder, p_run_id)\n", "",
     [f"{FORMATS}::test_a_take_gives_a_newer_format_only_to_a_process_that_knows_it"]),
    # A claim gives such a run to a process that knows it when the least loaded one does not.
    (f"{FORMATS_MIGRATION}:give_runs", "ELSE checkpoint_knower(picked.id, p_claimer) END", "ELSE NULL END",
     [f"{FORMATS}::test_a_claim_gives_a_newer_format_to_the_process_that_knows_it_whoever_is_least_loaded"]),
    # The sweeps pass by what no live process knows: else it fills their batches first, and the next
    # lapse is always now (a busy loop).
    ("leader.claim_lapsed", "AND (knows_checkpoint(%(holder)s, substr(name, 12)::uuid)", "AND (true",
     [f"{FORMATS}::test_the_sweeps_pass_by_what_no_live_process_knows"]),
    ("leader.next_lapse", "AND (expires_at >= now() OR", "AND (true OR",
     [f"{FORMATS}::test_the_sweeps_pass_by_what_no_live_process_knows"]),
    ("leader.orphaned_queued", "AND (knows_checkpoint(%(holder)s, r.id)", "AND (true",
     [f"{FORMATS}::test_orphaned_queued_runs_of_a_newer_format_take_no_place_in_the_batch"]),
    # A delegation starts only what its run's starter may (migration 032): the starter's authority is
    # read with the facts of a run born taken, and of a run taken (the resume after an approval), and a
    # revoked token counts.
    ("runs.create_taken", "LATERAL starter_authority(%(created_by)s)", "LATERAL starter_authority(NULL)",
     [f"{DELEGATION}::test_a_caller_limited_to_delegator_gets_no_writer_run_through_its_model"]),
    ("runs.acquire", "LATERAL starter_authority(run.created_by)", "LATERAL starter_authority(NULL)",
     [f"{DELEGATION}::test_a_caller_limited_to_delegator_gets_no_writer_run_through_its_model"]),
    ("runs.gate_facts", "LATERAL starter_authority(r.created_by)", "LATERAL starter_authority(NULL)",
     [f"{DELEGATION}::test_a_token_revoked_while_its_run_goes_on_stops_the_next_delegation"]),
    (f"{AUTHORITY_MIGRATION}:starter_authority", "coalesce(t.revoked_at IS NOT NULL, false)", "false",
     [f"{DELEGATION}::test_on_a_resume_the_delegation_is_gated_as_its_starter_stands_then"]),
    # Approvals follow their run (issue 32). A Stop of a waiting run withdraws its pending requests: without
    # the withdrawal the request stays in the queue and deciding it says the run goes on.
    ("runs.stop_idle", "WHERE a.run_id = run.id AND a.status = 'pending'", "WHERE false",
     [f"{WITHDRAWN}::{_ENDS}[runs.stop_idle]",
      f"{WITHDRAWN}::test_approving_the_held_call_of_a_stopped_run_answers_409_and_the_queue_no_longer_lists_it"]),
    # Each ending statement withdraws the pending requests only: a request decided before keeps its decision.
    ("runs.stop_idle", "AND a.status = 'pending'", "", [f"{WITHDRAWN}::{_ENDS}[runs.stop_idle]"]),
    ("runs.end", "AND a.status = 'pending'", "",
     [f"{WITHDRAWN}::{_ENDS}[runs.end]",
      f"{WITHDRAWN}::test_a_gate_that_fails_the_woken_run_withdraws_the_request_still_held"]),
    ("runs.fail", "AND a.status = 'pending'", "",
     [f"{WITHDRAWN}::{_ENDS}[runs.fail]",
      f"{WITHDRAWN}::test_a_checkpoint_that_fails_verification_on_waking_withdraws_the_request_still_held"]),
    ("runs.hand_on", "AND a.status = 'pending'", "", [f"{WITHDRAWN}::{_ENDS}[runs.hand_on]"]),
    # A request is decided only while its run has not ended: one the previous release left pending when it
    # stopped the run is refused, not approved for a run that will never send it.
    ("approvals.decide", "(status = 'pending' AND NOT run.ended)", "(status = 'pending')",
     [f"{WITHDRAWN}::test_a_request_its_run_left_pending_when_it_ended_is_not_decided"]),
    # The run's row read FOR SHARE: a Stop not yet committed is waited for and seen, not decided past.
    ("approvals.decide", "FOR SHARE OF r", "",
     [f"{WITHDRAWN}::test_a_decision_waits_for_a_stop_in_flight_and_then_finds_its_run_ended"]),
    # Issue 32: an event stream ends with its credential. The look at the credentials of open streams finds
    # a revocation no one heard (the listener down): without the condition a revoked token looks alive.
    ("tokens.unrevoked", "AND revoked_at IS NULL", "",
     [f"{STREAMS}::test_ends_the_listener_did_not_hear_are_found_by_the_credential_look"]),
    # And a session that expired.
    ("console.alive", "AND s.expires_at > now()", "",
     [f"{STREAMS}::test_ends_the_listener_did_not_hear_are_found_by_the_credential_look"]),
    # A sign-out tells every process, which ends that session's streams at once: without it, only the
    # safety look (every 30 s) would.
    ("console.end", "pg_notify('ticketiq_sessions', ended.id_hash)::text", "NULL::text",
     [f"{STREAMS}::test_a_sign_out_is_told_on_ticketiq_sessions_with_the_sessions_hash_once_it_commits",
      f"{STREAMS}::test_a_token_revoked_or_a_session_signed_out_on_another_process_ends_its_streams"]),
]  # fmt: skip


def declared_mutants() -> list[tuple[Mutant, list[str]]]:
    out = []
    for target, original, replacement, guards in DECLARED:
        if target.startswith("migrations/"):
            # A function of a migration (its last definition): the conjunct is found once in the file.
            path = QUERIES.parent / target.split(":", 1)[0]
            text = path.read_text()
            assert text.count(original) == 1, f"{original!r} is not once in {path.name}"
            start = text.index(original)
            out.append((Mutant(target, "condition", path, Span(start, start + len(original)), original, replacement),
                        guards))  # fmt: skip
            continue
        area, name = target.split(".", 1)
        path = QUERIES / f"{area}.sql"
        text = path.read_text()
        header = re.search(rf"^--\s*name:\s*{re.escape(name)}\s*$", text, re.MULTILINE)
        assert header is not None, f"no statement {target}"
        start = text.index(original, header.end())
        following = re.search(r"^--\s*name:", text[header.end() :], re.MULTILINE)
        assert following is None or start < header.end() + following.start(), f"{original!r} is not in {target}"
        out.append((Mutant(target, "condition", path, Span(start, start + len(original)), original, replacement),
                    guards))  # fmt: skip
    return out
