-- The fine-tuning job's own statements (jobs/fine_tune.py). Those about the job are fenced by
-- `job_holds(<its row>, %(job_id)s, %(attempt)s)` (I3, migration 025) and return a row when the
-- fence matched: no row means the job was taken over or handed back, and it sends nothing more.

-- name: mark_in_doubt
-- I2, I14: the job's state with one request (`what`: upload or create) marked in doubt, stored before
-- the request is sent. `in_flight_until` is the latest moment it can be in flight, on the database
-- clock: the write budget from now, or the job's lease expiry plus one request timeout if that is
-- sooner (no request is sent after the lease's local deadline, and none lasts longer than its timeout).
UPDATE jobs j
   SET state = %(state)s::jsonb || jsonb_build_object(%(what)s::text, jsonb_build_object(
           'in_flight_until', LEAST(now() + make_interval(secs => %(budget)s),
                                    (SELECT l.expires_at FROM leases l WHERE l.name = 'job:' || j.id::text)
                                    + make_interval(secs => %(request_timeout)s)),
           'attempt', j.attempt))
 WHERE job_holds(j, %(job_id)s, %(attempt)s)
RETURNING j.state

-- name: clock
-- I14: the database clock, which in-doubt marks are judged by; fenced, so a job taken over stops here.
SELECT now() AS now FROM jobs WHERE job_holds(jobs, %(job_id)s, %(attempt)s)

-- name: knowledge_issues
-- The issues of a project that carry labels, the examples a training file is made of (a read, not
-- about the job: unfenced). In key order through knowledge_project, so the same rows give the same file.
SELECT key, title, body, labels, status
  FROM knowledge
 WHERE source = 'jira' AND project = %(project)s AND cardinality(labels) > 0
 ORDER BY key
 LIMIT %(limit)s
