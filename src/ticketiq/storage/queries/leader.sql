-- Leadership, liveness and sweeps. Every claim is ONE conditional statement that takes the lease,
-- raises the attempt and counts one loss (I5): of two sweeps racing, the row lock makes one win and
-- the other re-check its condition against the winner's row and match nothing.

-- name: register
-- The liveness lock is taken inside the statement that inserts the row, so no one ever sees the
-- row of a live process without its lock.
WITH key AS (
    SELECT nextval('process_lock_keys')::int AS lock_key
), locked AS (
    SELECT key.lock_key, pg_advisory_lock(7117, key.lock_key) AS taken FROM key
), announce AS (
    SELECT pg_notify('ticketiq_processes', %(id)s)
)
INSERT INTO processes (id, lock_key, pid, host, version, build_commit, state_format, seal_format)
SELECT %(id)s, locked.lock_key, %(pid)s, %(host)s, %(version)s, %(commit)s, %(state_format)s, %(seal_format)s
  FROM locked, announce
RETURNING lock_key

-- name: retake
-- The liveness lock of a process that lost its liveness connection (the database failed over or
-- restarted, and with it every session's locks), taken again under the same identity, unless the
-- process was found dead or stalled meanwhile, or its lock is still held (by its own old session, which
-- the server has not yet seen go): the process then comes back under a new identity (I4). A claim_dead
-- racing this statement updates the same row: the row lock orders the two, and each re-checks its
-- condition against the other's row (EvalPlanQual), so either the process is ended and this matches
-- nothing (the lock it took goes with the connection the caller then closes), or it holds its lock and
-- the claim passes it by.
-- The leases it held are given up in the same statement (made lapsed, never deleted: the sweep claims
-- them under a new attempt, I3): the process lost them all when its mark went (I14). A lease another
-- transaction holds locked is passed by (SKIP LOCKED): that is the leader's sweep claiming it already,
-- and waiting on it while this statement holds the process row deadlocked with a sweep that waited
-- on the process row (seen in a failover). Passed by, it lapses on its own and is swept all the same.
WITH mine AS (
    SELECT lock_key FROM processes WHERE id = %(id)s AND ended_at IS NULL AND stalled_at IS NULL
), locked AS (
    SELECT lock_key FROM mine WHERE pg_try_advisory_lock(7117, lock_key)
), retaken AS (
    UPDATE processes p SET lock_key = locked.lock_key
      FROM locked
     WHERE p.id = %(id)s AND p.ended_at IS NULL AND p.stalled_at IS NULL
    RETURNING p.lock_key
), held AS (
    SELECT name FROM leases WHERE holder = %(id)s AND EXISTS (SELECT 1 FROM retaken)
       FOR UPDATE SKIP LOCKED
), given_up AS (
    UPDATE leases l SET expires_at = least(l.expires_at, now() - interval '1 millisecond')
      FROM held
     WHERE l.name = held.name AND l.holder = %(id)s
    RETURNING l.name
), announce AS (
    -- The leader's sweep wakes at once and claims what was given up.
    SELECT pg_notify('ticketiq_processes', %(id)s) FROM retaken
)
SELECT lock_key, (SELECT count(*) FROM given_up) AS given_up, (SELECT count(*) FROM announce) AS announced
  FROM retaken

-- name: heartbeat
SELECT 1 AS alive

-- name: end_process
WITH ended AS (
    UPDATE processes SET ended_at = now(), ended_how = 'stopped' WHERE id = %(id)s AND ended_at IS NULL RETURNING id
)
SELECT pg_notify('ticketiq_processes', %(id)s) FROM ended

-- name: lead
-- Take or keep the leader lease: ours already, lapsed, or its holder's liveness mark is free.
INSERT INTO leases (name, holder, expires_at)
VALUES ('leader', %(holder)s, now() + make_interval(secs => %(ttl)s))
ON CONFLICT (name) DO UPDATE
   SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at,
       acquired_at = CASE WHEN leases.holder = EXCLUDED.holder THEN leases.acquired_at ELSE now() END
 WHERE leases.holder = EXCLUDED.holder OR leases.expires_at < now() OR NOT process_alive(leases.holder)
RETURNING holder

-- name: leader
SELECT holder, expires_at, expires_at < now() AS lapsed FROM leases WHERE name = 'leader'

-- name: claim_lapsed
-- I5: checkpoint leases whose TTL ran out (the database clock decides), each claimed once, except those
-- of runs this process still drives (it never takes its own runs back while their drivers live). Each
-- is given to the least loaded live process (give_runs, migration 017): this one drives what lands
-- here, another is told to take its runs up. A lease whose checkpoint no live process can read (a newer
-- release's, migration 031) is passed by: left for a process that knows its format, it takes no place in
-- the batch.
WITH lapsed AS (
    SELECT name FROM leases
     WHERE expires_at < now() AND name LIKE 'checkpoint:%%'
       AND substr(name, 12) NOT IN (SELECT jsonb_array_elements_text(%(driving)s))
       AND (knows_checkpoint(%(holder)s, substr(name, 12)::uuid)
            OR checkpoint_knower(substr(name, 12)::uuid, %(holder)s) IS NOT NULL)
     ORDER BY expires_at
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
SELECT g.* FROM (SELECT coalesce(array_agg(name), '{}') AS names FROM lapsed) l,
       LATERAL give_runs(l.names, %(holder)s, %(ttl)s, 'lapsed') g

-- name: next_lapse
-- Seconds until the first checkpoint lease runs out, as things stand (NULL with none held). A lease
-- that is being renewed never gets near; one whose process stalled does, and the leader sweeps the
-- moment it lapses instead of at its next interval.
-- A lapsed lease left for a newer release (claim_lapsed passes it by) is no reason to sweep again.
SELECT extract(epoch FROM min(expires_at) - now())::float8 AS in_s FROM leases
 WHERE name LIKE 'checkpoint:%%'
   AND (expires_at >= now() OR knows_checkpoint(%(holder)s, substr(name, 12)::uuid)
        OR checkpoint_knower(substr(name, 12)::uuid, %(holder)s) IS NOT NULL)

-- name: left_for_release
-- Runs left for a process that knows their checkpoint's format (migration 031): the lease lapsed, this
-- release cannot read the checkpoint (state or seal format above the given ones) and no live process
-- can. For GET /v1/processes, a run's `waiting_for`, and the leader's log.
SELECT c.run_id, c.state_format, c.seal_format, l.holder AS last_holder, l.expires_at AS lapsed_at
  FROM leases l JOIN checkpoints c ON c.run_id = substr(l.name, 12)::uuid
 WHERE l.name LIKE 'checkpoint:%%' AND l.expires_at < now()
   AND (c.state_format > %(state_format)s OR c.seal_format > %(seal_format)s)
   AND (%(run_id)s::uuid IS NULL OR c.run_id = %(run_id)s::uuid)
   AND checkpoint_knower(c.run_id, NULL) IS NULL
 ORDER BY l.expires_at, c.run_id
 LIMIT %(limit)s

-- name: claim_dead
-- Processes whose liveness mark is free are ended, and their checkpoint leases claimed at once, without
-- waiting out the TTL, each given to the least loaded live process as claim_lapsed gives them. Fencing
-- (I3) keeps this safe if one was alive after all. (A process that stopped cleanly handed its runs
-- back; a lease it still holds waits for its TTL.)
WITH dead AS (
    UPDATE processes SET ended_at = now(), ended_how = CASE WHEN stalled_at IS NULL THEN 'died' ELSE 'stalled' END
     WHERE ended_at IS NULL AND id <> %(holder)s AND NOT process_alive(id)
    RETURNING id
), orphaned AS (
    SELECT l.name FROM leases l
     WHERE l.name LIKE 'checkpoint:%%' AND l.holder IN (SELECT id FROM dead)
       AND substr(l.name, 12) NOT IN (SELECT jsonb_array_elements_text(%(driving)s))
       FOR UPDATE SKIP LOCKED
)
SELECT g.* FROM (SELECT coalesce(array_agg(name), '{}') AS names FROM orphaned) o,
       LATERAL give_runs(o.names, %(holder)s, %(ttl)s, 'dead') g

-- name: claim_one
-- Take over one lapsed lease (a delegation's child): the same rule as the sweep, for one run.
WITH lapsed AS (
    SELECT l.name FROM leases l
     WHERE l.name = 'checkpoint:' || %(run_id)s::text
       AND (l.expires_at < now() OR NOT process_alive(l.holder))
       AND %(run_id)s::text NOT IN (SELECT jsonb_array_elements_text(%(driving)s))
       FOR UPDATE SKIP LOCKED
)
SELECT t.*, 'lapsed' AS why
  FROM lapsed, LATERAL take_run(substr(lapsed.name, 12)::uuid, %(holder)s, %(ttl)s, true) t

-- name: orphaned_queued
-- Runs queued (or handed back) with no lease, whose creator did not start them in time; and runs
-- handed back while they handed on their kept answer (I12: `answered`, no lease), which go on at once.
-- Those whose checkpoint no live process can read are passed by (as claim_lapsed passes them).
SELECT r.id FROM runs r
 WHERE (r.status = 'answered' OR (r.status = 'queued' AND r.created_at < now() - make_interval(secs => %(grace)s)))
   AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = 'checkpoint:' || r.id::text)
   AND (knows_checkpoint(%(holder)s, r.id) OR checkpoint_knower(r.id, %(holder)s) IS NOT NULL)
 ORDER BY r.created_at
 LIMIT %(limit)s

-- name: hand_back
-- A process stopping cleanly hands back the runs it drove: under the attempt it held each by (I3),
-- their leases go and they are queued again; the sweep gives them to another process under a new
-- attempt without counting a loss. Each attempt handed back ends `handed_back` (run_attempts).
WITH mine AS (
    SELECT c.run_id, c.attempt FROM checkpoints c
      JOIN jsonb_to_recordset(%(held)s) AS h (run_id uuid, attempt int)
        ON h.run_id = c.run_id AND h.attempt = c.attempt
       FOR UPDATE OF c
), released AS (
    DELETE FROM leases l USING mine
     WHERE l.name = 'checkpoint:' || mine.run_id::text AND l.holder = %(holder)s
    RETURNING mine.run_id, mine.attempt
), attempt_ended AS (
    UPDATE run_attempts a SET ended_at = now(), ended = 'handed_back'
      FROM released
     WHERE a.run_id = released.run_id AND a.attempt = released.attempt AND a.ended IS NULL
)
UPDATE runs SET status = 'queued'
  FROM released
 WHERE runs.id = released.run_id AND runs.status = 'running'
RETURNING runs.id

-- name: step_down
DELETE FROM leases WHERE name = 'leader' AND holder = %(holder)s

-- name: drain
-- A process beginning a clean stop is given no more runs (run_targets passes it by), and gives back
-- the runs given to it that it has not taken up: under the attempt each was given by (I3) their leases
-- go and they are queued again, for the sweep to give to another process without counting a loss.
WITH draining AS (
    UPDATE processes SET draining_at = coalesce(draining_at, now()) WHERE id = %(holder)s
), given AS (
    SELECT l.name, l.handed_attempt AS attempt FROM leases l
     WHERE l.holder = %(holder)s AND l.handed_why IS NOT NULL
       FOR UPDATE
), mine AS (
    SELECT c.run_id, c.attempt FROM checkpoints c
      JOIN given ON c.run_id = substr(given.name, 12)::uuid AND c.attempt = given.attempt
       FOR UPDATE OF c
), released AS (
    DELETE FROM leases l USING mine
     WHERE l.name = 'checkpoint:' || mine.run_id::text AND l.holder = %(holder)s
    RETURNING mine.run_id, mine.attempt
), attempt_ended AS (
    -- Given and never taken up: the attempt ends `handed_back` (run_attempts).
    UPDATE run_attempts a SET ended_at = now(), ended = 'handed_back'
      FROM released
     WHERE a.run_id = released.run_id AND a.attempt = released.attempt AND a.ended IS NULL
)
UPDATE runs SET status = 'queued'
  FROM released
 WHERE runs.id = released.run_id AND runs.status = 'running'
RETURNING runs.id
