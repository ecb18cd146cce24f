from __future__ import annotations

import re

import pytest

from ticketiq.storage.queries import QUERIES, parse


def test_named_blocks_are_split_by_name_and_area() -> None:
    text = "-- name: a\nSELECT 1;\n\n-- name: b\n-- a comment\nSELECT 2\n"
    assert parse(text, "x") == {"x.a": "SELECT 1", "x.b": "-- a comment\nSELECT 2"}


def test_a_name_defined_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x")


# What a run is made of: a statement that writes one of these writes about a run.
# A schedule fire's outcome is its run's hand-on: schedule_fires is written about a run too.
_RUN_TABLES = r"(runs|checkpoints|calls|approvals|transcripts|answers|inputs|schedule_fires)"
_WRITES_RUN = re.compile(rf"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+{_RUN_TABLES}\b", re.IGNORECASE)
_WRITES_RUN_LEASE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+leases\b(?!.*'leader')", re.IGNORECASE | re.S)
_AUDITS_RUN = re.compile(r"INSERT\s+INTO\s+audit_log\s*\([^)]*run_id[^)]*\)\s*(VALUES\s*\((?!'[^']*',\s*NULL)|SELECT)",
                         re.IGNORECASE)  # fmt: skip
# The attempt condition written out, or seal_checkpoint(run, attempt, ...) (migration 005), which is it.
_FENCED = re.compile(
    r"\battempt\s*=\s*(%\(attempt\)s|\w+\.attempt)\b|\bseal_checkpoint\(\s*%\(run_id\)s,\s*%\(attempt\)s", re.IGNORECASE
)
# give_runs (migration 017) takes each run it gives with take_run.
_TAKES = re.compile(r"\b(take_run|give_runs)\(", re.IGNORECASE)

# Statements about a run that no attempt makes, each with why it needs no attempt condition.
NOT_AN_ATTEMPTS = {
    "runs.create": "the run is born: no attempt exists before it",
    "runs.request_stop": "a person's Stop: a flag each attempt's gate check reads; it changes nothing written",
    "runs.stop_idle": "ends only a run no attempt drives (queued or waiting); the run's row lock orders it with a take",
    "approvals.decide": "a person's decision on a request; the attempt that filed it reads it",
    "runs.give_input": "a person's input to a question of a waiting run (no attempt drives it); the next reads it",
    "runs.purge_answers": "the leader drops kept answers past their time, never one still to be handed on",
    "schedules.fire": "the leader records a fire before its run exists: no attempt exists yet",
    "schedules.link_run": "the leader records the run its fire made, before any attempt drives it",
    "schedules.fire_failed": "the leader fails a fire that could make no run (no attempt ever existed)",
}


def writes_about_a_run(sql: str) -> bool:
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    lease = _WRITES_RUN_LEASE.search(body) is not None and "checkpoint:" in body
    return bool(_WRITES_RUN.search(body) or _AUDITS_RUN.search(body) or lease or _TAKES.search(body))


def test_every_statement_that_writes_about_a_run_is_fenced_by_the_attempt() -> None:
    # I3: every statement a process makes about a run carries the attempt; a take (take_run) is the one
    # statement that raises it, under the lease condition its caller checked.
    found = {name for name, sql in QUERIES.items() if writes_about_a_run(sql)}
    assert {"runs.write_checkpoint", "runs.end", "calls.mark_in_doubt", "leader.claim_lapsed"} <= found
    unfenced = sorted(
        name
        for name in found - set(NOT_AN_ATTEMPTS)
        if not _FENCED.search(QUERIES[name]) and not _TAKES.search(QUERIES[name])
    )
    assert unfenced == [], f"statements about a run without an attempt condition: {unfenced}"
    assert set(NOT_AN_ATTEMPTS) <= found  # no stale exemption


def test_the_discovery_sees_an_unfenced_write() -> None:
    assert writes_about_a_run("UPDATE calls SET status = 'done' WHERE run_id = %(run_id)s")
    assert not _FENCED.search("UPDATE calls SET status = 'done' WHERE run_id = %(run_id)s")
    assert writes_about_a_run("DELETE FROM leases WHERE name = 'checkpoint:' || %(run_id)s")
    assert not writes_about_a_run("DELETE FROM leases WHERE name = 'leader' AND holder = %(holder)s")
    assert not writes_about_a_run(
        "INSERT INTO audit_log (action, run_id, actor, detail) VALUES ('gate.changed', NULL, 1, 2)"
    )
    assert writes_about_a_run("INSERT INTO audit_log (action, run_id, actor, detail) VALUES (%(a)s, %(run_id)s, 1, 2)")
