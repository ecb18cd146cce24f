-- Background jobs (issue 10). Every statement a running job makes about itself is fenced by
-- `job_holds(<its row>, %(job_id)s, %(attempt)s)` (I3, migration 025: its id, its attempt, still
-- running): no row means it was taken over, swept or handed back, and it stops. The claim and the sweep
-- are each ONE conditional statement under row locks: of two workers (or two sweeps) racing, one takes a
-- job and the other skips it.

-- name: create
-- A job made through the API (or a workflow run's route), with its audit row: who made it is the
-- token's name. An id derived from a request's Idempotency-Key that names a job already made returns
-- that job (made, and audited, once), made durable first (I20, migration 026).
WITH made AS (
    INSERT INTO jobs (id, kind, params, resumable, created_by)
    VALUES (%(id)s, %(kind)s, %(params)s, %(resumable)s, %(by)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING *
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'job.created', %(by)s, jsonb_build_object('job_id', made.id, 'kind', made.kind) FROM made
)
SELECT made.*, NULL::boolean AS durable FROM made
UNION ALL
SELECT jobs.*, durable() FROM jobs WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM made)

-- name: claim
-- The worker takes the oldest queued jobs, up to its free slots: each set running under a new attempt
-- and this holder, with its lease `job:<id>` in the same statement (renewed with the process's other
-- leases from then on). SKIP LOCKED: a job another worker is taking is passed over, never taken twice.
WITH next AS (
    SELECT id FROM jobs
     WHERE status = 'queued'
     ORDER BY created_at, id
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
), taken AS (
    UPDATE jobs j
       SET status = 'running', attempt = j.attempt + 1, holder = %(holder)s, started_at = now()
      FROM next
     WHERE j.id = next.id
    RETURNING j.*
), lease AS (
    INSERT INTO leases (name, holder, expires_at)
    SELECT 'job:' || taken.id::text, %(holder)s, now() + make_interval(secs => %(ttl)s) FROM taken
    ON CONFLICT (name) DO UPDATE
       SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, acquired_at = now(),
           handed_why = NULL, handed_attempt = NULL
)
SELECT * FROM taken ORDER BY created_at, id

-- name: save
-- I3: the job's checkpoint (its state) and progress, fenced by its attempt. Returns who asked to
-- cancel it (NULL: no one); no row: fenced off.
UPDATE jobs
   SET state = coalesce(%(state)s, state),
       progress_done = coalesce(%(done)s::bigint, progress_done),
       progress_total = coalesce(%(total)s::bigint, progress_total)
 WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
RETURNING cancel_requested_by

-- name: finish
-- I3: the job ends (succeeded, failed or cancelled) under the attempt that ran it, its lease deleted in
-- the same statement. No row: fenced off, nothing written.
WITH ended AS (
    UPDATE jobs
       SET status = %(status)s, result = %(result)s, error = %(error)s, finished_at = now(),
           progress_done = CASE WHEN %(status)s = 'succeeded' AND progress_total IS NOT NULL
                                THEN greatest(progress_done, progress_total) ELSE progress_done END
     WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
    RETURNING id
), released AS (
    DELETE FROM leases l USING ended WHERE l.name = 'job:' || ended.id::text
)
SELECT id FROM ended

-- name: get
SELECT * FROM jobs WHERE id = %(id)s

-- name: list
-- Newest first (through jobs_created), optionally of one status and one kind.
SELECT * FROM jobs
 WHERE (%(status)s::text IS NULL OR status = %(status)s)
   AND (%(kind)s::text IS NULL OR kind = %(kind)s)
 ORDER BY created_at DESC, id
 LIMIT %(limit)s

-- name: cancel
-- A queued job is cancelled at once; a running one is asked to stop (cancel_requested_at): it ends
-- `cancelled` at its next save or progress. Ended jobs are not touched (no row).
WITH asked AS (
    UPDATE jobs
       SET status = CASE WHEN status = 'queued' THEN 'cancelled' ELSE status END,
           finished_at = CASE WHEN status = 'queued' THEN now() ELSE finished_at END,
           error = CASE WHEN status = 'queued' THEN 'cancelled by ' || %(by)s || ' before it started' ELSE error END,
           cancel_requested_at = coalesce(cancel_requested_at, now()),
           cancel_requested_by = coalesce(cancel_requested_by, %(by)s)
     WHERE id = %(id)s AND status IN ('queued', 'running')
    RETURNING *
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'job.cancel_requested', %(by)s,
           jsonb_build_object('job_id', asked.id, 'kind', asked.kind, 'status', asked.status)
      FROM asked
)
SELECT * FROM asked

-- name: restart
-- A new queued job with the kind and params of an interrupted, failed or cancelled one, from scratch.
-- Once per job (jobs_restarted_once): a second restart makes nothing (no row).
WITH old AS (
    SELECT id, kind, params, resumable FROM jobs
     WHERE id = %(id)s AND status IN ('interrupted', 'failed', 'cancelled')
), made AS (
    INSERT INTO jobs (id, kind, params, resumable, created_by, restarted_from)
    SELECT %(new_id)s, old.kind, old.params, old.resumable, %(by)s, old.id FROM old
    ON CONFLICT (restarted_from) WHERE restarted_from IS NOT NULL DO NOTHING
    RETURNING *
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'job.restarted', %(by)s,
           jsonb_build_object('job_id', made.id, 'kind', made.kind, 'restarted_from', made.restarted_from)
      FROM made
)
SELECT * FROM made

-- name: restarted_as
-- The job a restart made, read when a restart made nothing: a repeat of that restart is answered with
-- it, so it is made durable first (I20, migration 026).
SELECT id, durable() AS durable FROM jobs WHERE restarted_from = %(id)s

-- name: found
-- A job as a request that answers "done already" from it finds it (a cancel of a job cancelled
-- before): durable first (I20, migration 026). Other reads of a job use `get`, which writes nothing.
SELECT *, durable() AS durable FROM jobs WHERE id = %(id)s

-- name: hand_back
-- A process stopping cleanly hands back the jobs it ran, each under the attempt it held it by (I3), its
-- lease deleted in the same statement: a resumable job is queued again with nothing lost (no loss
-- counted); any other is interrupted with the reason; one a person asked to cancel is cancelled.
WITH mine AS (
    SELECT j.id FROM jobs j
      JOIN jsonb_to_recordset(%(held)s) AS h (job_id uuid, attempt int)
        ON job_holds(j, h.job_id, h.attempt)
       FOR UPDATE OF j
), released AS (
    DELETE FROM leases l USING mine WHERE l.name = 'job:' || mine.id::text
), back AS (
    UPDATE jobs j
       SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         WHEN j.resumable THEN 'queued' ELSE 'interrupted' END,
           finished_at = CASE WHEN j.resumable AND j.cancel_requested_at IS NULL THEN NULL ELSE now() END,
           error = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled by ' || j.cancel_requested_by
                        WHEN j.resumable THEN j.error
                        ELSE format('interrupted: the process running it stopped (%%s stopped cleanly); '
                                    'restart it with POST /v1/jobs/%%s/restart', j.holder, j.id) END
      FROM mine
     WHERE j.id = mine.id
    RETURNING j.id, j.kind, j.status
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'job.handed_back', %(holder)s, jsonb_build_object('job_id', back.id, 'kind', back.kind,
                                                                    'status', back.status)
      FROM back
)
SELECT id, kind, status FROM back

-- name: unclaim
-- Jobs a worker claimed but never started, because its process began to stop or lost its liveness mark
-- while the claim was out: queued again under the attempt the claim gave them (I3), no loss counted,
-- their leases deleted.
WITH mine AS (
    SELECT j.id FROM jobs j
      JOIN jsonb_to_recordset(%(held)s) AS h (job_id uuid, attempt int)
        ON job_holds(j, h.job_id, h.attempt)
       FOR UPDATE OF j
), released AS (
    DELETE FROM leases l USING mine WHERE l.name = 'job:' || mine.id::text
)
UPDATE jobs j SET status = 'queued'
  FROM mine
 WHERE j.id = mine.id
RETURNING j.id

-- name: sweep
-- The leader's sweep: running jobs whose lease lapsed (or is gone), or whose holder's liveness mark is
-- free (the process died: no waiting out the TTL; fencing keeps it safe if it lived after all), each
-- in this one statement under its row lock, its lease deleted. A resumable job is queued again for any
-- process's worker with one loss counted (failed with the reason once its losses pass `max_losses`);
-- any other is failed `interrupted` with the reason; one a person asked to cancel ends cancelled.
WITH lost AS (
    SELECT j.id, j.resumable, j.losses + 1 AS losses, j.cancel_requested_at, j.cancel_requested_by,
           CASE WHEN l.name IS NULL THEN format('%%s holds no lease on it', j.holder)
                WHEN l.expires_at < now() THEN format('%%s stopped renewing its lease', l.holder)
                ELSE format('%%s died', l.holder) END AS why
      FROM jobs j LEFT JOIN leases l ON l.name = 'job:' || j.id::text
     WHERE j.status = 'running'
       AND (l.name IS NULL OR l.expires_at < now() OR NOT process_alive(l.holder))
     ORDER BY j.started_at
     LIMIT %(limit)s
       FOR UPDATE OF j SKIP LOCKED
), released AS (
    DELETE FROM leases l USING lost WHERE l.name = 'job:' || lost.id::text
), swept AS (
    UPDATE jobs j
       SET losses = lost.losses,
           status = CASE WHEN lost.cancel_requested_at IS NOT NULL THEN 'cancelled'
                         WHEN NOT lost.resumable THEN 'interrupted'
                         WHEN lost.losses > %(max_losses)s THEN 'failed'
                         ELSE 'queued' END,
           finished_at = CASE WHEN lost.resumable AND lost.cancel_requested_at IS NULL
                                   AND lost.losses <= %(max_losses)s THEN NULL ELSE now() END,
           error = CASE WHEN lost.cancel_requested_at IS NOT NULL
                        THEN 'cancelled by ' || lost.cancel_requested_by
                        WHEN NOT lost.resumable
                        THEN format('interrupted: the process running it stopped (%%s); '
                                    'restart it with POST /v1/jobs/%%s/restart', lost.why, j.id)
                        WHEN lost.losses > %(max_losses)s
                        THEN format('lost %%s times (TICKETIQ_JOB_MAX_LOSSES=%%s), the last because %%s; '
                                    'restart it with POST /v1/jobs/%%s/restart',
                                    lost.losses, %(max_losses)s, lost.why, j.id)
                        ELSE j.error END
      FROM lost
     WHERE j.id = lost.id
    RETURNING j.id, j.kind, j.status, j.losses, j.error, lost.why
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'job.lost', %(holder)s,
           jsonb_build_object('job_id', swept.id, 'kind', swept.kind, 'status', swept.status,
                              'losses', swept.losses, 'why', swept.why)
      FROM swept
)
SELECT id, kind, status, losses, error, why FROM swept
