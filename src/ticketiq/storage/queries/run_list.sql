-- The run list (GET /v1/runs) and its counts: reads only. Each filter is served by an index of migration
-- 022 ordered as the list is, newest first by (created_at, id): runs_created, runs_status_created,
-- runs_agent_created, runs_channel_created, runs_created_by_created (also a caller's scope) and
-- runs_created_by_status_created (a caller's runs of one status), runs_search (q, the stored run_text()),
-- and runs_held_created (held=true: the few held runs, migration 035).

-- name: custom_plans
-- Run first, in the list's transaction. Every filter is optional (`<value> IS NULL OR ...`): planned for
-- the values given, an absent one folds away and a given one picks its index. A generic plan (which a
-- statement psycopg prepared may get after its fifth run) must keep every OR and can use none of them.
SET LOCAL plan_cache_mode = force_custom_plan

-- name: page
-- A page of runs, newest first, strictly after (older than) the cursor's run; one more than the page,
-- to know whether another follows. The page's runs are picked first, from `runs` alone, so the plan's
-- joins (the checkpoint, a waiting run's oldest wait) are made for those runs only, whichever index
-- picked them. One status is an equality: the runs_status_created index then gives the page in order.
-- A waiting run's oldest wait is ordered as `run_list.oldest_first` orders them: when asked, then step,
-- call, input before approval.
SELECT r.id, r.agent, r.status, r.channel, r.created_by, r.created_at, r.held_at,
       greatest(coalesce(r.updated_at, r.finished_at, r.started_at, r.created_at), c.written_at) AS updated_at,
       c.attempt, c.losses, c.step AS steps,
       w.kind AS wait_kind, w.question AS wait_question, w.question_id AS wait_question_id,
       w.approval_id AS wait_approval_id, w.tool AS wait_tool
  FROM (
      SELECT r.id, r.agent, r.status, r.channel, r.created_by, r.created_at, r.updated_at, r.started_at,
             r.finished_at, r.held_at
        FROM runs r
       WHERE (%(scope)s::text IS NULL OR r.created_by = %(scope)s::text)
         AND (%(status)s::text IS NULL OR r.status = %(status)s::text)
         AND (%(statuses)s::text IS NULL OR r.status = ANY (string_to_array(%(statuses)s::text, ',')))
         AND (%(agent)s::text IS NULL OR r.agent = %(agent)s::text)
         AND (%(channel)s::text IS NULL OR r.channel = %(channel)s::text)
         AND (%(created_by)s::text IS NULL OR r.created_by = %(created_by)s::text)
         AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
         AND (%(until)s::timestamptz IS NULL OR r.created_at < %(until)s::timestamptz)
         AND (%(q)s::text IS NULL OR r.search @@ websearch_to_tsquery('simple', %(q)s::text))
         AND (%(held)s::boolean IS NULL OR (r.held_at IS NOT NULL) = %(held)s::boolean)
         AND (%(after_at)s::timestamptz IS NULL
              OR (r.created_at, r.id) < (%(after_at)s::timestamptz, %(after_id)s::uuid))
       ORDER BY r.created_at DESC, r.id DESC
       LIMIT %(limit)s
  ) r
  JOIN checkpoints c ON c.run_id = r.id
  LEFT JOIN LATERAL (
      SELECT waits.kind, waits.question, waits.question_id, waits.approval_id, waits.tool FROM (
          SELECT 0 AS part, i.step, i.idx, i.asked_at, 'input' AS kind, i.question, i.id AS question_id,
                 NULL::uuid AS approval_id, NULL::text AS tool
            FROM inputs i WHERE i.run_id = r.id AND i.status = 'pending' AND r.status = 'waiting'
          UNION ALL
          -- A restored run's write held for an operator (I24) says why it is asked.
          SELECT 1, a.step, a.idx, a.created_at, 'approval', coalesce(a.asked_why, 'approve ' || a.tool || '?'),
                 NULL::uuid, a.id, a.tool
            FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending' AND r.status = 'waiting'
      ) waits
       ORDER BY waits.asked_at, waits.step, waits.idx, waits.part
       LIMIT 1
  ) w ON true
 ORDER BY r.created_at DESC, r.id DESC

-- name: counts
-- Runs by status, of one token (`scope`) or of everyone: every run still going however old (through
-- runs_status), and the runs made in the last day that ended (through runs_created). Counting every
-- run that ever ended reads the whole history (210 ms at 1,000,000 runs, measured) on every look.
SELECT r.status, count(*)::bigint AS n
  FROM runs r
 WHERE (%(scope)s::text IS NULL OR r.created_by = %(scope)s::text)
   AND (r.status IN ('queued', 'running', 'waiting', 'answered') OR r.created_at >= now() - interval '1 day')
 GROUP BY r.status
