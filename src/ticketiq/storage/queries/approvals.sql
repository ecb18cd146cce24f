-- name: file
-- One request per call of a step: filing again coalesces with the request already there (pending or
-- decided) and returns it. Fenced like every statement about a run.
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), filed AS (
    INSERT INTO approvals (id, run_id, step, idx, tool, args, step_key)
    SELECT %(id)s, fence.run_id, %(step)s, %(idx)s, %(tool)s, %(args)s, %(step_key)s FROM fence
    ON CONFLICT (run_id, step, idx) DO NOTHING
    RETURNING id, status, decided_by, reason
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT %(run_id)s, 'approval', jsonb_build_object('approval_id', filed.id, 'tool', %(tool)s::text,
                                                      'status', 'pending') FROM filed
)
SELECT id, status, decided_by, reason, true AS filed_now FROM filed
UNION ALL
SELECT a.id, a.status, a.decided_by, a.reason, false FROM approvals a, fence
 WHERE a.run_id = fence.run_id AND a.step = %(step)s AND a.idx = %(idx)s
   AND NOT EXISTS (SELECT 1 FROM filed)

-- name: for_step
SELECT id, idx, status, decided_by, reason FROM approvals WHERE run_id = %(run_id)s AND step = %(step)s

-- name: decide
WITH decided AS (
    UPDATE approvals SET status = %(status)s, decided_by = %(by)s, reason = %(reason)s, decided_at = now()
     WHERE id = %(id)s AND status = 'pending'
    RETURNING id, run_id, tool, status
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT decided.run_id, 'approval', jsonb_build_object('approval_id', decided.id, 'tool', decided.tool,
                                                          'status', decided.status, 'by', %(by)s::text)
      FROM decided
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.decided', decided.run_id, %(by)s,
           jsonb_build_object('approval_id', decided.id, 'tool', decided.tool, 'decision', decided.status)
      FROM decided
)
SELECT id, run_id, tool, status FROM decided

-- name: get
SELECT id, run_id, step, idx, tool, args, step_key, status, decided_by, reason, created_at, decided_at
  FROM approvals WHERE id = %(id)s

-- name: list
SELECT id, run_id, step, idx, tool, args, step_key, status, decided_by, reason, created_at, decided_at
  FROM approvals WHERE (%(status)s::text IS NULL OR status = %(status)s::text)
 ORDER BY created_at LIMIT %(limit)s
