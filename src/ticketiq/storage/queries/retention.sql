-- The retention pass (issue 34, leader/retention.py). Each statement deletes one bounded batch
-- (%(limit)s rows of the table its policy is about) in its own short transaction, reading an index
-- (tests/integration/test_retention_plans.py reads the plans at 200k rows). Rows are taken FOR UPDATE SKIP
-- LOCKED: two passes at once never wait on each other and never take the same row, and a row a request
-- holds is passed by for the next pass. `fence`: the leader's pass runs only while the leader lease is
-- the caller's (`%(leader)s`; NULL for `ticketiq retention run`, which no leader runs): a process that lost
-- leadership deletes nothing more, and `fenced` tells it to stop.

-- name: purgeable_runs
-- The next batch of ended runs past the policy, oldest first (runs_purgeable): unheld, whose children are
-- gone (a held or living child keeps its parent), with no kept answer still to be handed on (I12), no
-- request pending a person, and no workflow that has not ended naming them. Read without locks: the
-- export writes these before `purge_runs` deletes them, which checks all of it again.
SELECT r.id
  FROM runs r
 WHERE r.finished_at IS NOT NULL AND r.held_at IS NULL
   AND r.finished_at < now() - make_interval(secs => %(keep_s)s)
   AND r.status IN ('succeeded', 'failed', 'interrupted', 'stopped')
   -- Written out, not a function: a function's lookups would be made row by row and hidden from the plan.
   AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_run_id = r.id)
   AND NOT EXISTS (SELECT 1 FROM answers a WHERE a.run_id = r.id AND a.handed_on_at IS NULL AND a.kept_until > now())
   AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')
   AND NOT EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = r.id AND i.status = 'pending')
   AND NOT EXISTS (SELECT 1 FROM workflow_steps w JOIN jobs j ON j.id = w.job_id
                    WHERE w.run_id = r.id AND j.finished_at IS NULL)
 ORDER BY r.finished_at
 LIMIT %(limit)s

-- name: purge_runs
-- One batch of runs purged with every row that names them: the tables that cascade from runs go with the
-- run's row; ticket events, webhook deliveries, schedule fires and Teams inbox rows are deleted here (a
-- schedule fire or inbox row left without its run would read as one whose run is still to be made); a
-- workflow step keeps its output and loses the link; an audit row outlives its run on its own clock
-- (TICKETIQ_RETENTION_AUDIT), no longer naming it by run_id (the id stays in its detail as `purged_run`);
-- an Idempotency-Key that pointed at the run goes with it; the claim of the signed delivery that started
-- it is marked, so that the same delivery is refused while its signature is valid. `%(ids)s`: only these
-- runs (a JSON list) (those the export wrote), or NULL for the batch the policy makes due. Every condition of
-- `purgeable_runs` is checked again under the row lock.
WITH fence AS (
    SELECT retention_may_run(%(leader)s) AS ok
), batch AS (
    SELECT r.id
      FROM runs r, fence
     WHERE fence.ok
       AND r.finished_at IS NOT NULL AND r.held_at IS NULL
       AND r.finished_at < now() - make_interval(secs => %(keep_s)s)
       AND (%(ids)s::jsonb IS NULL OR r.id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(ids)s::jsonb)::uuid)))
       AND r.status IN ('succeeded', 'failed', 'interrupted', 'stopped')
       -- Written out, not a function: a function's lookups would be made row by row and hidden from the plan.
   AND NOT EXISTS (SELECT 1 FROM runs c WHERE c.parent_run_id = r.id)
   AND NOT EXISTS (SELECT 1 FROM answers a WHERE a.run_id = r.id AND a.handed_on_at IS NULL AND a.kept_until > now())
   AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')
   AND NOT EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = r.id AND i.status = 'pending')
   AND NOT EXISTS (SELECT 1 FROM workflow_steps w JOIN jobs j ON j.id = w.job_id
                    WHERE w.run_id = r.id AND j.finished_at IS NULL)
     ORDER BY r.finished_at
     LIMIT %(limit)s
       FOR UPDATE OF r SKIP LOCKED
), gone AS (
    -- One array, so that each table below is read by its run_id index for exactly these runs (a join
    -- with the batch is planned as a hash join over the whole table once a batch is a few hundred runs).
    SELECT coalesce(array_agg(id), '{}') AS ids FROM batch
), claims AS (
    UPDATE signed_requests s SET run_purged_at = now()
      FROM (SELECT 'trigger:' || d.trigger AS source, d.delivery_id FROM trigger_deliveries d
             WHERE d.run_id = ANY ((SELECT ids FROM gone)::uuid[])
            UNION
            SELECT 'jira', e.event_id FROM ticket_events e WHERE e.run_id = ANY ((SELECT ids FROM gone)::uuid[])) purged
     WHERE s.source = purged.source AND s.delivery_id = purged.delivery_id AND s.run_purged_at IS NULL
    RETURNING 1
), ticket_events_gone AS (
    DELETE FROM ticket_events e WHERE e.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), deliveries_gone AS (
    DELETE FROM trigger_deliveries d WHERE d.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), fires_gone AS (
    DELETE FROM schedule_fires f WHERE f.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), inbox_gone AS (
    DELETE FROM teams_inbox i WHERE i.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), keys_gone AS (
    DELETE FROM idempotency_keys k WHERE k.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), steps_unlinked AS (
    UPDATE workflow_steps w SET run_id = NULL WHERE w.run_id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING 1
), audit_unlinked AS (
    UPDATE audit_log a SET run_id = NULL, detail = a.detail || jsonb_build_object('purged_run', a.run_id)
     WHERE a.run_id = ANY ((SELECT ids FROM gone)::uuid[])
    RETURNING 1
), counted AS (
    SELECT (SELECT count(*) FROM checkpoints c WHERE c.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS checkpoints,
           (SELECT count(*) FROM calls c WHERE c.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS calls,
           (SELECT count(*) FROM transcripts t WHERE t.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS transcripts,
           (SELECT count(*) FROM run_attempts a WHERE a.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS run_attempts,
           (SELECT count(*) FROM answers a WHERE a.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS answers,
           (SELECT count(*) FROM approvals a WHERE a.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS approvals,
           (SELECT count(*) FROM inputs i WHERE i.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS inputs,
           (SELECT count(*) FROM a2a_tasks t WHERE t.run_id = ANY ((SELECT ids FROM gone)::uuid[])) AS a2a_tasks
), runs_gone AS (
    -- The tables above that reference runs ON DELETE CASCADE go with these rows (counted first).
    DELETE FROM runs r WHERE r.id = ANY ((SELECT ids FROM gone)::uuid[]) RETURNING r.id
)
SELECT (SELECT ok FROM fence) AS ok,
       (SELECT count(*) FROM runs_gone) AS runs,
       counted.*,
       (SELECT count(*) FROM ticket_events_gone) AS ticket_events,
       (SELECT count(*) FROM deliveries_gone) AS trigger_deliveries,
       (SELECT count(*) FROM fires_gone) AS schedule_fires,
       (SELECT count(*) FROM inbox_gone) AS teams_inbox,
       (SELECT count(*) FROM keys_gone) AS idempotency_keys,
       (SELECT count(*) FROM steps_unlinked) AS workflow_steps_unlinked,
       (SELECT count(*) FROM audit_unlinked) AS audit_log_unlinked,
       (SELECT count(*) FROM claims) AS signed_requests_marked
  FROM counted

-- name: purge_audit
-- Audit rows older than TICKETIQ_RETENTION_AUDIT, oldest first (audit_log_at), whatever run they were
-- about: the audit has its own clock.
WITH fence AS (
    SELECT retention_may_run(%(leader)s) AS ok
), batch AS (
    SELECT a.id FROM audit_log a, fence
     WHERE fence.ok AND a.at < now() - make_interval(secs => %(keep_s)s)
     ORDER BY a.at
     LIMIT %(limit)s
       FOR UPDATE OF a SKIP LOCKED
), gone AS (
    DELETE FROM audit_log a USING batch b WHERE a.id = b.id RETURNING 1
)
SELECT (SELECT ok FROM fence) AS ok, (SELECT count(*) FROM gone) AS audit_log

-- name: purge_jobs
-- Ended jobs past TICKETIQ_RETENTION_JOBS (jobs_finished) with their steps (workflow_steps cascades) and
-- red-team answers. A job a classifier was trained by is kept: the classifier names it as its source. A
-- job restarted from this one keeps its own row and loses the link.
WITH fence AS (
    SELECT retention_may_run(%(leader)s) AS ok
), batch AS (
    SELECT j.id FROM jobs j, fence
     WHERE fence.ok AND j.finished_at IS NOT NULL
       AND j.finished_at < now() - make_interval(secs => %(keep_s)s)
       AND NOT EXISTS (SELECT 1 FROM classifiers c WHERE c.job_id = j.id)
     ORDER BY j.finished_at
     LIMIT %(limit)s
       FOR UPDATE OF j SKIP LOCKED
), answers_gone AS (
    DELETE FROM red_team_answers a USING batch b WHERE a.job_id = b.id RETURNING 1
), unlinked AS (
    UPDATE jobs j SET restarted_from = NULL FROM batch b WHERE j.restarted_from = b.id RETURNING 1
), counted AS (
    SELECT count(*) AS workflow_steps FROM workflow_steps w JOIN batch b ON w.job_id = b.id
), gone AS (
    DELETE FROM jobs j USING batch b WHERE j.id = b.id RETURNING 1
)
SELECT (SELECT ok FROM fence) AS ok, (SELECT count(*) FROM gone) AS jobs, counted.workflow_steps,
       (SELECT count(*) FROM answers_gone) AS red_team_answers
  FROM counted

-- name: purge_short_lived
-- The short-lived rows, each on its fixed rule (docs/operate.md, "Retention"), one bounded batch of each:
-- Idempotency-Keys answered (or claimed and never answered) past TICKETIQ_IDEMPOTENCY_TTL_S; console
-- sessions past their expiry; processes ended over %(processes_s)s ago holding no lease; webhook claims
-- past their signature's window (a Jira claim is kept: Jira signs no time, so its signature never stops
-- being valid); schedule fires and Teams inbox rows that made no run (failed or skipped, with their reason)
-- past %(runless_s)s. A fire or inbox row with a run goes with its run; one still to be made is never
-- touched (the sweeps need it). Kept answers past TICKETIQ_ANSWER_TTL_S (I12), once handed on.
WITH fence AS (
    SELECT retention_may_run(%(leader)s) AS ok
), keys AS (
    DELETE FROM idempotency_keys i
     USING (SELECT scope, principal, key FROM idempotency_keys, fence
             WHERE fence.ok AND coalesce(answered_at, created_at) < now() - make_interval(secs => %(keys_s)s)
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE (i.scope, i.principal, i.key) = (old.scope, old.principal, old.key)
    RETURNING 1
), sessions AS (
    DELETE FROM console_sessions s
     USING (SELECT id_hash FROM console_sessions, fence
             WHERE fence.ok AND expires_at < now()
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE s.id_hash = old.id_hash
    RETURNING 1
), processes_gone AS (
    DELETE FROM processes p
     USING (SELECT id FROM processes, fence
             WHERE fence.ok AND ended_at < now() - make_interval(secs => %(processes_s)s)
             ORDER BY ended_at
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE p.id = old.id AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.holder = p.id)
    RETURNING 1
), claims AS (
    DELETE FROM signed_requests s
     USING (SELECT source, digest FROM signed_requests, fence
             WHERE fence.ok AND kept_until < now()
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE (s.source, s.digest) = (old.source, old.digest)
    RETURNING 1
), fires AS (
    DELETE FROM schedule_fires f
     USING (SELECT schedule_id, fire_at FROM schedule_fires, fence
             WHERE fence.ok AND run_id IS NULL AND reason IS NOT NULL
               AND fired_at < now() - make_interval(secs => %(runless_s)s)
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE (f.schedule_id, f.fire_at) = (old.schedule_id, old.fire_at)
    RETURNING 1
), answers_gone AS (
    -- I12: kept answers past TICKETIQ_ANSWER_TTL_S, never one still to be handed on (its run `answered`).
    DELETE FROM answers a
     USING (SELECT k.run_id FROM answers k, fence
             WHERE fence.ok AND k.kept_until < now()
               AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = k.run_id AND r.status = 'answered')
             ORDER BY k.kept_until
             LIMIT %(limit)s
               FOR UPDATE OF k SKIP LOCKED) old
     WHERE a.run_id = old.run_id
    RETURNING 1
), inbox AS (
    DELETE FROM teams_inbox t
     USING (SELECT id FROM teams_inbox, fence
             WHERE fence.ok AND run_id IS NULL AND reason IS NOT NULL
               AND received_at < now() - make_interval(secs => %(runless_s)s)
             LIMIT %(limit)s
               FOR UPDATE SKIP LOCKED) old
     WHERE t.id = old.id
    RETURNING 1
)
SELECT (SELECT ok FROM fence) AS ok,
       (SELECT count(*) FROM keys) AS idempotency_keys,
       (SELECT count(*) FROM sessions) AS console_sessions,
       (SELECT count(*) FROM processes_gone) AS processes,
       (SELECT count(*) FROM claims) AS signed_requests,
       (SELECT count(*) FROM fires) AS schedule_fires,
       (SELECT count(*) FROM inbox) AS teams_inbox,
       (SELECT count(*) FROM answers_gone) AS answers

-- name: begin_pass
INSERT INTO retention_passes (process, dry_run) VALUES (%(process)s, %(dry_run)s) RETURNING id, started_at

-- name: end_pass
-- The pass's record closed with what it deleted; the oldest records beyond the last 1,000 go.
WITH ended AS (
    UPDATE retention_passes
       SET ended_at = now(), deleted = %(deleted)s, exported = %(exported)s, error = %(error)s
     WHERE id = %(id)s
    RETURNING id
)
DELETE FROM retention_passes
 WHERE id < (SELECT id FROM ended) - 1000

-- name: last_pass
SELECT id, started_at, ended_at, process, dry_run, deleted, exported, error
  FROM retention_passes
 WHERE NOT dry_run
 ORDER BY started_at DESC
 LIMIT 1

-- name: oldest
-- The oldest row of each table a policy is about (each through an index, by its own clock), as seconds
-- before now; NULL when the table is empty.
SELECT 'runs' AS "table", extract(epoch FROM now() - (SELECT min(created_at) FROM runs)) AS age_s
UNION ALL SELECT 'audit_log', extract(epoch FROM now() - (SELECT min(at) FROM audit_log))
UNION ALL SELECT 'jobs', extract(epoch FROM now() - (SELECT min(created_at) FROM jobs))
UNION ALL SELECT 'idempotency_keys',
          extract(epoch FROM now() - (SELECT min(coalesce(answered_at, created_at)) FROM idempotency_keys))
UNION ALL SELECT 'console_sessions', extract(epoch FROM now() - (SELECT min(created_at) FROM console_sessions))
UNION ALL SELECT 'processes', extract(epoch FROM now() - (SELECT min(ended_at) FROM processes))
UNION ALL SELECT 'signed_requests', extract(epoch FROM now() - (SELECT min(received_at) FROM signed_requests))
UNION ALL SELECT 'schedule_fires', extract(epoch FROM now() - (SELECT min(fired_at) FROM schedule_fires))
UNION ALL SELECT 'teams_inbox', extract(epoch FROM now() - (SELECT min(received_at) FROM teams_inbox))

-- name: due
-- How many rows each policy makes due now (the runs ended past their policy and unheld; the audit rows
-- and ended jobs past theirs). Counted through the same indexes the pass reads.
SELECT (SELECT count(*) FROM runs
         WHERE finished_at IS NOT NULL AND held_at IS NULL
           AND %(runs_s)s::float8 > 0 AND finished_at < now() - make_interval(secs => %(runs_s)s)) AS runs,
       (SELECT count(*) FROM audit_log
         WHERE %(audit_s)s::float8 > 0 AND at < now() - make_interval(secs => %(audit_s)s)) AS audit_log,
       (SELECT count(*) FROM jobs
         WHERE finished_at IS NOT NULL
           AND %(jobs_s)s::float8 > 0 AND finished_at < now() - make_interval(secs => %(jobs_s)s)) AS jobs,
       (SELECT count(*) FROM runs WHERE held_at IS NOT NULL) AS held_runs

-- name: rows
-- Every table's rows, counted (for `ticketiq retention status`, an operator's question: exact, not the
-- planner's estimate).
SELECT 'runs' AS "table", (SELECT count(*) FROM runs) AS n
UNION ALL SELECT 'checkpoints', (SELECT count(*) FROM checkpoints)
UNION ALL SELECT 'calls', (SELECT count(*) FROM calls)
UNION ALL SELECT 'transcripts', (SELECT count(*) FROM transcripts)
UNION ALL SELECT 'run_attempts', (SELECT count(*) FROM run_attempts)
UNION ALL SELECT 'answers', (SELECT count(*) FROM answers)
UNION ALL SELECT 'approvals', (SELECT count(*) FROM approvals)
UNION ALL SELECT 'inputs', (SELECT count(*) FROM inputs)
UNION ALL SELECT 'a2a_tasks', (SELECT count(*) FROM a2a_tasks)
UNION ALL SELECT 'audit_log', (SELECT count(*) FROM audit_log)
UNION ALL SELECT 'jobs', (SELECT count(*) FROM jobs)
UNION ALL SELECT 'workflow_steps', (SELECT count(*) FROM workflow_steps)
UNION ALL SELECT 'red_team_answers', (SELECT count(*) FROM red_team_answers)
UNION ALL SELECT 'idempotency_keys', (SELECT count(*) FROM idempotency_keys)
UNION ALL SELECT 'console_sessions', (SELECT count(*) FROM console_sessions)
UNION ALL SELECT 'processes', (SELECT count(*) FROM processes)
UNION ALL SELECT 'signed_requests', (SELECT count(*) FROM signed_requests)
UNION ALL SELECT 'schedule_fires', (SELECT count(*) FROM schedule_fires)
UNION ALL SELECT 'teams_inbox', (SELECT count(*) FROM teams_inbox)
UNION ALL SELECT 'ticket_events', (SELECT count(*) FROM ticket_events)
UNION ALL SELECT 'trigger_deliveries', (SELECT count(*) FROM trigger_deliveries)
