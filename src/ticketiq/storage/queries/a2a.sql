-- A2A tasks (migration 006): a task is its a2a_tasks row and its run, whose state it shows (never a
-- stored copy). `scope` is whose tasks the caller reads: a token's name, or NULL for every task.

-- name: get
SELECT run_id, context_id, history, metadata, answer, error, state, changed_at
  FROM a2a_task_rows
 WHERE run_id = %(run_id)s AND (%(scope)s::text IS NULL OR created_by = %(scope)s)

-- name: progress
-- What the run says of its task, whether or not the task's row was written yet: a follower reads this.
SELECT run_id, answer, error, state, changed_at
  FROM a2a_run_states
 WHERE run_id = %(run_id)s AND (%(scope)s::text IS NULL OR created_by = %(scope)s)

-- name: save
-- The task's row, for its run only (no row for a task id that names none). Written again, the messages
-- not yet kept are appended (by messageId: a message is never dropped nor kept twice, whichever process
-- writes last) and the metadata merged; the context and the token that made it never change.
INSERT INTO a2a_tasks (run_id, context_id, history, metadata, created_by)
SELECT r.id, %(context_id)s, %(history)s, %(metadata)s, %(created_by)s FROM runs r WHERE r.id = %(run_id)s
ON CONFLICT (run_id) DO UPDATE
   SET history = a2a_tasks.history || coalesce((
           SELECT jsonb_agg(m.message ORDER BY m.n)
             FROM jsonb_array_elements(EXCLUDED.history) WITH ORDINALITY AS m (message, n)
            WHERE NOT a2a_tasks.history @> jsonb_build_array(jsonb_build_object('messageId', m.message -> 'messageId'))
       ), '[]'::jsonb),
       metadata = a2a_tasks.metadata || EXCLUDED.metadata,
       updated_at = now()
RETURNING run_id

-- name: list
-- One page of the caller's tasks, newest first, after the cursor (created_at, run_id) when given, and
-- how many match in all (one row with NULL task columns when the page is empty).
WITH mine AS (
    SELECT run_id, context_id, history, metadata, created_at, answer, error, state, changed_at
      FROM a2a_task_rows
     WHERE (%(scope)s::text IS NULL OR created_by = %(scope)s)
       AND (%(context_id)s::text IS NULL OR context_id = %(context_id)s)
       AND (%(state)s::text IS NULL OR state = %(state)s)
       AND (%(changed_after)s::timestamptz IS NULL OR changed_at >= %(changed_after)s)
), page AS (
    SELECT * FROM mine
     WHERE %(after_at)s::timestamptz IS NULL OR (created_at, run_id) < (%(after_at)s, %(after_id)s::uuid)
     ORDER BY created_at DESC, run_id DESC
     LIMIT %(limit)s
)
SELECT total.n AS total, page.*
  FROM (SELECT count(*) AS n FROM mine) total LEFT JOIN page ON true
 ORDER BY page.created_at DESC, page.run_id DESC

-- name: delete
-- The task's row only: the run and its transcript stay.
DELETE FROM a2a_tasks WHERE run_id = %(run_id)s AND (%(scope)s::text IS NULL OR created_by = %(scope)s)
