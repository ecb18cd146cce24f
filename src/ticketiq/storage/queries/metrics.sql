-- name: gauges
-- The cluster's queues for `GET /metrics`, in one statement, each counted through its partial index.
SELECT (SELECT count(*) FROM runs WHERE status = 'waiting')::int AS runs_waiting,
       (SELECT count(*) FROM approvals WHERE status = 'pending')::int AS approvals_pending,
       (SELECT count(*) FROM jobs WHERE status = 'queued')::int AS jobs_queued
