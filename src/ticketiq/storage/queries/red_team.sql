-- Red-team runs (issue 10; I13): one answer per prompt, each written by one statement fenced by the
-- job's attempt (I3); FOR SHARE waits for a concurrent sweep, then sees the job interrupted.

-- name: record_answer
WITH fence AS (
    SELECT id FROM jobs
     WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
       FOR SHARE
)
INSERT INTO red_team_answers (job_id, idx, agent, prompt, answer, asked_tools, verdict)
SELECT fence.id, %(idx)s::int, %(agent)s::text, %(prompt)s::text, %(answer)s::text, %(asked_tools)s::jsonb,
       %(verdict)s::text
  FROM fence
RETURNING job_id, idx

