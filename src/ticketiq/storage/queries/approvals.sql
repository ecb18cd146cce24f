-- name: file
-- I15: one request per call, bound to it: filing again for the same call (same binding) coalesces with
-- the request already there, pending or decided, and returns it. Fenced like every statement about a
-- run (I3).
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), filed AS (
    INSERT INTO approvals (id, run_id, step, idx, tool, args, step_key, binding)
    SELECT %(id)s, fence.run_id, %(step)s, %(idx)s, %(tool)s, %(args)s, %(step_key)s, %(binding)s FROM fence
    ON CONFLICT (run_id, binding) DO NOTHING
    RETURNING id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT %(run_id)s, 'approval', jsonb_build_object('approval_id', filed.id, 'tool', %(tool)s::text,
                                                      'status', 'pending') FROM filed
)
SELECT * FROM filed
UNION ALL
SELECT a.id, a.run_id, a.step, a.idx, a.tool, a.args, a.step_key, a.binding, a.status, a.decided_by, a.reason,
       a.created_at, a.decided_at
  FROM approvals a, fence
 WHERE a.run_id = fence.run_id AND a.binding = %(binding)s
   AND NOT EXISTS (SELECT 1 FROM filed)

-- name: for_step
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
  FROM approvals WHERE run_id = %(run_id)s AND step = %(step)s ORDER BY created_at

-- name: decide
WITH decided AS (
    UPDATE approvals SET status = %(status)s, decided_by = %(by)s, reason = %(reason)s, decided_at = now()
     WHERE id = %(id)s AND status = 'pending'
    RETURNING id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT decided.run_id, 'approval', jsonb_build_object('approval_id', decided.id, 'tool', decided.tool,
                                                          'status', decided.status, 'by', %(by)s::text)
      FROM decided
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.decided', decided.run_id, %(by)s,
           jsonb_build_object('approval_id', decided.id, 'tool', decided.tool, 'decision', decided.status,
                              'step', decided.step, 'idx', decided.idx, 'binding', decided.binding)
      FROM decided
)
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
  FROM decided

-- name: get
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
  FROM approvals WHERE id = %(id)s

-- name: list
SELECT id, run_id, step, idx, tool, args, step_key, binding, status, decided_by, reason, created_at, decided_at
  FROM approvals WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
 ORDER BY created_at LIMIT %(limit)s
