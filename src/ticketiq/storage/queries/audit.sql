-- name: list
SELECT id, at, action, run_id, actor, detail FROM audit_log
 WHERE (%(run_id)s::uuid IS NULL OR run_id = %(run_id)s::uuid)
   AND (%(action)s::text IS NULL OR action = %(action)s::text)
   AND id > %(after)s
 ORDER BY id LIMIT %(limit)s
