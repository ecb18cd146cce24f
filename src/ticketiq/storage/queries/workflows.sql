-- Workflow runs (issue 10): jobs of kind `workflow`. Every statement a run makes about itself is ONE
-- statement fenced by the job's attempt (I3: `job_holds(jobs, %(job_id)s, %(attempt)s)`, migration
-- 025): the job's state (its checkpoint) and the step's row land together, or, taken over meanwhile
-- (also while the statement waited on the takeover's row lock), nothing does and no row comes back.
-- Each returns who asked to cancel the job (NULL: no one).

-- name: step_begun
-- Before a step's effect: a write marked in doubt (I2) until `in_flight_until`, the mark plus its
-- budget on the database clock (I14); an agent step's run recorded the moment it is made.
WITH job AS (
    UPDATE jobs SET state = %(state)s
     WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
    RETURNING id, attempt, cancel_requested_by
), step AS (
    INSERT INTO workflow_steps (job_id, seq, step_id, kind, tool, agent, key, status, args, run_id,
                                in_flight_until, attempt)
    SELECT job.id, %(seq)s, %(step_id)s, %(kind)s, %(tool)s, %(agent)s, %(key)s, %(status)s, %(args)s, %(run_id)s,
           CASE WHEN %(budget)s::float8 IS NULL THEN NULL ELSE now() + make_interval(secs => %(budget)s) END,
           job.attempt
      FROM job
    ON CONFLICT (job_id, seq) DO UPDATE
       SET status = EXCLUDED.status, args = EXCLUDED.args, run_id = coalesce(EXCLUDED.run_id, workflow_steps.run_id),
           in_flight_until = EXCLUDED.in_flight_until, attempt = EXCLUDED.attempt
     WHERE workflow_steps.key = EXCLUDED.key
    RETURNING seq
)
SELECT job.cancel_requested_by, (SELECT count(*) FROM step) AS written FROM job

-- name: step_ended
-- A step's outcome and the state that moves past it (or, failed, keeps it), and progress (steps
-- executed), in one statement. A step left in doubt by a lost attempt and settled now is audited in the
-- same statement (`workflow.step.settled`, I8).
WITH job AS (
    UPDATE jobs SET state = %(state)s, progress_done = %(done)s
     WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
    RETURNING id, attempt, cancel_requested_by
), step AS (
    INSERT INTO workflow_steps (job_id, seq, step_id, kind, tool, agent, key, status, args, output, error, run_id,
                                settled, attempt, ended_at)
    SELECT job.id, %(seq)s, %(step_id)s, %(kind)s, %(tool)s, %(agent)s, %(key)s, %(status)s, %(args)s, %(output)s,
           %(error)s, %(run_id)s, %(settled)s, job.attempt, now()
      FROM job
    ON CONFLICT (job_id, seq) DO UPDATE
       SET status = EXCLUDED.status, args = coalesce(EXCLUDED.args, workflow_steps.args), output = EXCLUDED.output,
           error = EXCLUDED.error, run_id = coalesce(EXCLUDED.run_id, workflow_steps.run_id),
           settled = coalesce(EXCLUDED.settled, workflow_steps.settled), attempt = EXCLUDED.attempt,
           ended_at = now()
     WHERE workflow_steps.key = EXCLUDED.key
    RETURNING seq
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'workflow.step.settled', NULL, %(holder)s,
           jsonb_build_object('job_id', job.id, 'attempt', job.attempt, 'seq', %(seq)s::int,
                              'step', %(step_id)s::text, 'tool', %(tool)s::text, 'key', %(key)s::text,
                              'happened', %(settled)s::text, 'status', %(status)s::text)
      FROM job
     WHERE %(settled)s::text IS NOT NULL
)
SELECT job.cancel_requested_by, (SELECT count(*) FROM step) AS written FROM job

-- name: in_flight_for
-- I14: how many seconds (database clock) until the write marked for this step can no longer be in
-- flight; 0 once it cannot. Fenced like the others: a run taken over reads nothing.
SELECT greatest(0, extract(epoch FROM s.in_flight_until - now()))::float8 AS wait_s
  FROM jobs j
  JOIN workflow_steps s ON s.job_id = j.id AND s.seq = %(seq)s AND s.key = %(key)s
 WHERE job_holds(j, %(job_id)s, %(attempt)s)

-- name: gate_facts
-- Everything the gates need for a workflow's tool step, in one read: the tenant's quarantine, the
-- `workflow` channel, and the workflow's owner (its run-as principal): whether it may run, its unrevoked
-- grants, and which tools need approval.
SELECT (SELECT q.reason FROM quarantines q WHERE q.kind = 'tenant' AND q.name = %(tenant)s) AS tenant_quarantine,
       coalesce((SELECT ch.enabled FROM channels ch WHERE ch.name = %(channel)s), true) AS channel_enabled,
       coalesce((SELECT p.may_run FROM principals p WHERE p.name = %(owner)s), false) AS owner_may_run,
       coalesce((SELECT array_agg(g.tool) FROM grants g WHERE g.principal = %(owner)s AND NOT g.revoked),
                '{}') AS granted,
       coalesce((SELECT array_agg(t.tool) FROM tool_policies t WHERE t.needs_approval), '{}') AS needs_approval

-- name: steps
-- A workflow run's step executions, in order.
SELECT seq, step_id, kind, tool, agent, key, status, args, output, error, run_id::text AS run_id, settled,
       attempt, started_at, ended_at
  FROM workflow_steps
 WHERE job_id = %(job_id)s
 ORDER BY seq
