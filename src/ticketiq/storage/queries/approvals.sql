-- name: file
-- I15: one request per call, bound to it: filing again for the same call (same binding) coalesces with
-- the request already there, pending or decided, and returns it. Fenced like every statement about a
-- run (I3).
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), filed AS (
    INSERT INTO approvals (id, run_id, step, idx, tool, args, step_key, binding, asked_why)
    SELECT %(id)s, fence.run_id, %(step)s, %(idx)s, %(tool)s, %(args)s, %(step_key)s, %(binding)s, %(asked_why)s
      FROM fence
    ON CONFLICT (run_id, binding) DO NOTHING
    RETURNING id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at,
              asked_why
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT %(run_id)s, 'approval', jsonb_build_object('approval_id', filed.id, 'tool', %(tool)s::text,
                                                      'status', 'pending', 'why', %(asked_why)s::text) FROM filed
)
SELECT * FROM filed
UNION ALL
SELECT a.id, a.run_id, a.step, a.idx, a.tool, a.args, a.step_key, a.binding, a.status, a.decided_by, a.reason,
       a.created_at, a.decided_at, a.asked_why
  FROM approvals a, fence
 WHERE a.run_id = fence.run_id AND a.binding = %(binding)s
   AND NOT EXISTS (SELECT 1 FROM filed)

-- name: for_step
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at,
       asked_why
  FROM approvals WHERE run_id = %(run_id)s AND step = %(step)s ORDER BY created_at

-- name: decide
-- A decision on a pending request of a run that has not ended (issue 32: a withdrawn one matches nothing).
-- The same decision by the same person again (a retry whose answer was lost) matches and changes nothing:
-- its `decided_at` is kept, so not `fresh`: no note, no audit row (I18). A row is written either way, so
-- the answer waited for the standby (I20). The run's row is read FOR SHARE: a statement ending the run
-- meanwhile is waited for and seen, whether it withdrew the request or left it pending (migration 033).
WITH run AS (
    SELECT r.id, r.status IN ('succeeded', 'failed', 'interrupted', 'stopped') AS ended
      FROM runs r JOIN approvals a ON a.run_id = r.id
     WHERE a.id = %(id)s
       FOR SHARE OF r
), decided AS (
    UPDATE approvals
       SET status = %(status)s, decided_by = %(by)s, reason = %(reason)s,
           decided_at = CASE WHEN status = 'pending' THEN now() ELSE decided_at END
      FROM run
     WHERE approvals.id = %(id)s AND approvals.run_id = run.id
       AND ((status = 'pending' AND NOT run.ended)
            OR (status = %(status)s AND decided_by = %(by)s AND reason IS NOT DISTINCT FROM %(reason)s))
    RETURNING approvals.id, approvals.run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason,
              created_at, decided_at, asked_why, decided_at = now() AS fresh
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT decided.run_id, 'approval', jsonb_build_object('approval_id', decided.id, 'tool', decided.tool,
                                                          'status', decided.status, 'by', %(by)s::text)
      FROM decided
     WHERE decided.fresh
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.decided', decided.run_id, %(by)s,
           jsonb_build_object('approval_id', decided.id, 'tool', decided.tool, 'decision', decided.status,
                              'step', decided.step, 'idx', decided.idx, 'binding', decided.binding)
      FROM decided
     WHERE decided.fresh
)
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at,
       asked_why
  FROM decided

-- name: get
-- Read when a decision matched nothing: "decided already" is answered from it, so it is made durable
-- first (I20, migration 026).
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at,
       asked_why, durable() AS durable
  FROM approvals WHERE id = %(id)s

-- name: list
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at,
       asked_why
  FROM approvals WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
 ORDER BY created_at LIMIT %(limit)s

-- name: list_asked
-- The list with who asked: each request's run's agent and the token that started the run, in the same
-- read (the console's approvals queue; one statement however many runs the page shows).
SELECT a.id, a.run_id, a.step, a.idx, a.tool, a.args, a.step_key, a.binding, a.status, a.decided_by, a.reason,
       a.created_at, a.decided_at, a.asked_why, r.agent, r.created_by
  FROM approvals a JOIN runs r ON r.id = a.run_id
 WHERE (%(status)s::text IS NULL OR a.status = %(status)s::text)
 ORDER BY a.created_at LIMIT %(limit)s

-- name: resume_restored
-- I24: an operator lets a restored run go on (`ticketiq runs resume`): every request a restore asked of a
-- person for this run (`asked_why` set), still pending, is approved at once; the write each holds is then sent
-- (the operator takes the risk). Audited once, `agent.run.resumed_by_operator`, with the requests it decided.
-- The run's row is read FOR SHARE, as a decision reads it: a statement ending the run meanwhile is seen.
WITH run AS (
    SELECT r.id, r.status FROM runs r WHERE r.id = %(run_id)s FOR SHARE
), decided AS (
    UPDATE approvals a
       SET status = 'approved', decided_by = %(by)s, reason = %(reason)s, decided_at = now()
      FROM run
     WHERE a.run_id = run.id AND a.status = 'pending' AND a.asked_why IS NOT NULL
       AND run.status NOT IN ('succeeded', 'failed', 'interrupted', 'stopped')
    RETURNING a.id, a.run_id, a.tool, a.step, a.idx, a.asked_why
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT d.run_id, 'approval', jsonb_build_object('approval_id', d.id, 'tool', d.tool, 'status', 'approved',
                                                    'by', %(by)s::text)
      FROM decided d
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.resumed_by_operator', %(run_id)s, %(by)s,
           jsonb_build_object('reason', %(reason)s::text,
                              'approvals', jsonb_agg(jsonb_build_object('approval_id', d.id, 'tool', d.tool,
                                                                        'step', d.step, 'idx', d.idx,
                                                                        'asked_why', d.asked_why)))
      FROM decided d HAVING count(*) > 0
)
SELECT run.id, run.status, (SELECT count(*) FROM decided)::int AS decided FROM run
