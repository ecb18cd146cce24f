-- A run's timeline (GET /v1/runs/{id}/timeline): a few reads, each through an index on the run id, that
-- views/timeline.py assembles. Only reads: the times they show were written by the statements that did
-- what they time (migration 023).

-- name: attempts
SELECT attempt, process, started_at, first_at, ended_at, ended, lost_detected_at
  FROM run_attempts WHERE run_id = %(run_id)s ORDER BY attempt

-- name: resumed
-- I8: each takeover's audit: the step it went on from and what became of each call that step left.
SELECT at, detail FROM audit_log
 WHERE run_id = %(run_id)s AND action = 'agent.run.crash_resumed'
 ORDER BY id

-- name: step_notes
-- The notes of each model step (`model_step`, `model_answer`), with when their statement wrote them.
SELECT t.at, e.value AS entry
  FROM transcripts t,
       jsonb_array_elements(CASE WHEN jsonb_typeof(t.body -> 'entries') = 'array' THEN t.body -> 'entries'
                                 ELSE '[]'::jsonb END) e
 WHERE t.run_id = %(run_id)s AND t.kind = 'entries' AND e.value ->> 'kind' IN ('model_step', 'model_answer')
 ORDER BY t.id

-- name: pending
-- What still rides in the checkpoint, not yet written to its tables: notes and finished calls.
SELECT coalesce(s.state -> 'unflushed', '[]'::jsonb) AS entries,
       coalesce(s.state -> 'unflushed_calls', '[]'::jsonb) AS calls
  FROM (SELECT c.state::jsonb AS state FROM checkpoints c WHERE c.run_id = %(run_id)s) s

-- name: calls
SELECT step, idx, attempt, tool, class, step_key, sent_key, status, outcome, settlement, marked_at, sent_at,
       outcome_at
  FROM calls WHERE run_id = %(run_id)s ORDER BY step, idx

-- name: approvals
SELECT id, step, idx, tool, status, created_at, decided_at
  FROM approvals WHERE run_id = %(run_id)s ORDER BY created_at, id

-- name: positions
-- Where each followed run's timeline stands, for all the runs a process's streams follow in one statement:
-- when any of these moved, something a follower shows may have changed (a checkpoint, a note, a call, a
-- decision, an attempt, an audit). No row for a run that is not there.
SELECT r.id::text AS run_id, r.status, c.attempt, c.written_at,
       (SELECT max(t.id) FROM transcripts t WHERE t.run_id = r.id) AS entry,
       (SELECT max(k.updated_at) FROM calls k WHERE k.run_id = r.id) AS call,
       (SELECT max(coalesce(a.decided_at, a.created_at)) FROM approvals a WHERE a.run_id = r.id) AS approval,
       (SELECT max(greatest(m.started_at, m.first_at, m.ended_at)) FROM run_attempts m WHERE m.run_id = r.id)
           AS attempts,
       (SELECT max(l.id) FROM audit_log l WHERE l.run_id = r.id) AS audit
  FROM runs r JOIN checkpoints c ON c.run_id = r.id
 WHERE r.id = ANY(ARRAY(SELECT jsonb_array_elements_text(%(run_ids)s)::uuid))
