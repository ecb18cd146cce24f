"""I3 for jobs: every statement in `queries/jobs.sql` that writes about a job once a worker claimed it
carries the job's attempt; the few that no attempt makes say why. (Behaviour tests in
tests/integration/test_jobs.py show the fence holding; this finds a statement that forgot it.)"""

from __future__ import annotations

import re

from ticketiq.storage.queries import QUERIES

_WRITES = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(jobs|leases)\b", re.IGNORECASE)
_FENCED = re.compile(r"\battempt\s*=\s*(%\(attempt\)s|\w+\.attempt)\b", re.IGNORECASE)

NOT_AN_ATTEMPTS = {
    "jobs.create": "the job is born: no attempt exists before it",
    "jobs.claim": "the one statement that raises the attempt, of a queued job under its row lock",
    "jobs.cancel": "a person's request: ends a queued job (no attempt runs it) or flags a running one",
    "jobs.restart": "makes a new job from an ended one: no attempt runs either",
    "jobs.sweep": "the leader takes a lost job back under its row lock, its lease lapsed or its holder dead",
}


def test_every_statement_that_writes_about_a_claimed_job_is_fenced_by_the_attempt() -> None:
    found = {name for name, sql in QUERIES.items() if name.startswith("jobs.") and _WRITES.search(sql)}
    assert {"jobs.save", "jobs.finish", "jobs.hand_back", "jobs.unclaim"} <= found
    unfenced = sorted(name for name in found - set(NOT_AN_ATTEMPTS) if not _FENCED.search(QUERIES[name]))
    assert unfenced == [], f"statements about a job without an attempt condition: {unfenced}"
    assert set(NOT_AN_ATTEMPTS) <= found  # no stale exemption


def test_the_fenced_statements_also_require_the_job_to_be_running() -> None:
    for name in ("jobs.save", "jobs.finish", "jobs.hand_back", "jobs.unclaim"):
        assert re.search(r"status\s*=\s*'running'", QUERIES[name]), name
