-- Calls of a step. The in-doubt mark and the outcome are each one statement (I2), fenced by the
-- checkpoint row's attempt (I3): FOR SHARE waits for a concurrent takeover and then sees its attempt.

-- name: mark_in_doubt
-- Inserts the call's row in doubt (or marks it again when a resume resends it with the same key). The
-- class written at the first mark stays (I10). `marked_at` is the database clock at the mark; marked
-- again, the times of the earlier send are cleared (the send that follows records its own).
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), mark AS (
    INSERT INTO calls (run_id, step, idx, attempt, provider_call_id, tool, class, step_key, sent_key, args,
                       gate, status, marked_at, in_flight_until)
    SELECT fence.run_id, %(step)s, %(idx)s, %(attempt)s, %(provider_call_id)s, %(tool)s, %(class)s,
           %(step_key)s, %(sent_key)s, %(args)s, 'allow', 'in_doubt', now(),
           -- I14: the latest moment this write can be in flight, on the database clock.
           LEAST(now() + make_interval(secs => %(budget)s),
                 (SELECT l.expires_at FROM leases l WHERE l.name = 'checkpoint:' || %(run_id)s::text)
                 + make_interval(secs => %(request_timeout)s))
      FROM fence
    ON CONFLICT (run_id, step, idx) DO UPDATE
       SET status = 'in_doubt', attempt = EXCLUDED.attempt, sent_key = EXCLUDED.sent_key,
           in_flight_until = EXCLUDED.in_flight_until, updated_at = now(), marked_at = now(),
           sent_at = NULL, outcome_at = NULL
     WHERE calls.status IN ('pending', 'in_doubt')
    RETURNING run_id
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT mark.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM mark
)
SELECT run_id FROM mark

-- name: record_outcome
-- `sent_at` and `outcome_at`: epoch seconds of the wall clock of this process, taken when the request
-- went out and when its answer came back (a settlement sends nothing: the send's time, if known, stays).
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), done AS (
    UPDATE calls c
       SET status = %(status)s, outcome = %(outcome)s, settlement = %(settlement)s, updated_at = now(),
           sent_at = coalesce(to_timestamp(%(sent_at)s::float8), c.sent_at),
           outcome_at = to_timestamp(%(outcome_at)s::float8)
      FROM fence
     WHERE c.run_id = fence.run_id AND c.step = %(step)s AND c.idx = %(idx)s
    RETURNING c.run_id
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT done.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM done
)
SELECT run_id FROM done

-- name: reopen_uncertain
-- I9, I14: a hand-on write whose vendor's answer left its effect open (a 5xx, no answer) is put back in
-- doubt by the attempt that sent it, its window kept, so it is settled as a resume settles a write in
-- doubt: read back once it can no longer be in flight, sent again (same key) only if it is not there.
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
)
UPDATE calls c
   SET status = 'in_doubt', outcome = NULL, updated_at = now()
  FROM fence
 WHERE c.run_id = fence.run_id AND c.step = %(step)s AND c.idx = %(idx)s AND c.status = 'done'
   AND c.outcome -> 'result' ->> 'outcome' = %(uncertain)s
RETURNING c.run_id

-- name: record_reference
-- I9: what a call in doubt can be found again by (a remote agent's task id), recorded the moment its
-- vendor named it. Only by the attempt that marked the call, and only while it is in doubt: nothing
-- once the run was taken over (I3) or the call settled.
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
)
UPDATE calls c
   SET remote_ref = %(ref)s, updated_at = now()
  FROM fence
 WHERE c.run_id = fence.run_id AND c.step = %(step)s AND c.idx = %(idx)s
   AND c.attempt = %(attempt)s AND c.status = 'in_doubt'
RETURNING c.run_id

-- name: for_step
-- `in_flight_s`: how long, on the database clock, the call may still be in flight (I14); 0 when past.
SELECT step, idx, attempt, provider_call_id, tool, class, step_key, sent_key, args, gate, status, outcome, settlement,
       remote_ref, greatest(0, coalesce(extract(epoch FROM in_flight_until - now()), 0))::float8 AS in_flight_s
  FROM calls WHERE run_id = %(run_id)s AND step = %(step)s ORDER BY idx

-- name: for_run
SELECT step, idx, provider_call_id, tool, class, step_key, sent_key, gate, status, outcome, settlement,
       created_at, updated_at
  FROM calls WHERE run_id = %(run_id)s ORDER BY step, idx
