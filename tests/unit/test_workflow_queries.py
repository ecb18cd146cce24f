"""I3 for workflow runs: every statement in `queries/workflows.sql` that writes (the job's state, a
step's row, an audit row) or reads for a decision (the in-flight wait) carries the job's attempt and
requires it to be running. (Behaviour: tests/integration/test_workflow_fencing.py.)"""

from __future__ import annotations

import re

from ticketiq.storage.queries import QUERIES

_WRITES = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(jobs|workflow_steps|audit_log|leases)\b", re.I)
_FENCE = re.compile(
    r"id\s*=\s*%\(job_id\)s\s+AND\s+\w*\.?attempt\s*=\s*%\(attempt\)s\s+AND\s+\w*\.?status\s*=\s*'running'", re.I
)


def test_every_workflow_statement_that_writes_is_fenced_by_the_jobs_attempt() -> None:
    writing = {name for name, sql in QUERIES.items() if name.startswith("workflows.") and _WRITES.search(sql)}
    assert writing == {"workflows.step_begun", "workflows.step_ended"}
    for name in writing | {"workflows.in_flight_for"}:
        assert _FENCE.search(QUERIES[name]), name


def test_the_discovery_sees_an_unfenced_write() -> None:
    assert _WRITES.search("INSERT INTO workflow_steps (job_id) VALUES (%(job_id)s)")
    assert not _FENCE.search("UPDATE jobs SET state = %(state)s WHERE id = %(job_id)s AND attempt = %(attempt)s")
