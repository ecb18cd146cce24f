-- Cron schedules and their fires. A fire is one row per (schedule, fire time), inserted ON CONFLICT DO
-- NOTHING: of two leaders firing the same time one records it, the other nothing. The only statement a
-- run's attempt makes here (record_outcome, the cron hand-on) is fenced by that attempt (I3).

-- name: clock
SELECT now() AS now

-- name: create
-- A schedule made through the API, with its audit row (who made it is the token's name). An id derived
-- from a request's Idempotency-Key that names a schedule already made returns that schedule, `made`
-- false (made, and audited, once; I19), made durable first (I20, migration 026).
WITH made AS (
    INSERT INTO schedules (id, agent, cron, timezone, input, next_fire_at, created_by)
    VALUES (%(id)s, %(agent)s, %(cron)s, %(timezone)s, %(input)s, %(next_fire_at)s, %(by)s)
    ON CONFLICT (id) DO NOTHING
    RETURNING *
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'schedule.created', %(by)s,
           jsonb_build_object('schedule_id', made.id, 'agent', made.agent, 'cron', made.cron,
                              'timezone', made.timezone)
      FROM made
)
SELECT id, name, agent, cron, timezone, input, next_fire_at, created_by, created_at, true AS made,
       NULL::boolean AS durable
  FROM made
UNION ALL
SELECT id, name, agent, cron, timezone, input, next_fire_at, created_by, created_at, false, durable()
  FROM schedules
 WHERE id = %(id)s AND NOT EXISTS (SELECT 1 FROM made)

-- name: seed
-- A schedule the agents file declares, upserted by its name: every process runs this at start, so it
-- is inserted once and updated when the file changed it; its next fire time moves only when its times
-- did. A declared schedule a person deleted stays deleted.
WITH seeded AS (
    INSERT INTO schedules (id, name, agent, cron, timezone, input, next_fire_at)
    VALUES (%(id)s, %(name)s, %(agent)s, %(cron)s, %(timezone)s, %(input)s, %(next_fire_at)s)
    ON CONFLICT (name) DO UPDATE
       SET agent = EXCLUDED.agent, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone, input = EXCLUDED.input,
           next_fire_at = CASE WHEN (schedules.cron, schedules.timezone) = (EXCLUDED.cron, EXCLUDED.timezone)
                               THEN schedules.next_fire_at ELSE EXCLUDED.next_fire_at END,
           updated_at = now()
     WHERE schedules.deleted_at IS NULL
       AND (schedules.agent, schedules.cron, schedules.timezone, schedules.input)
           IS DISTINCT FROM (EXCLUDED.agent, EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.input)
    RETURNING id, (xmax = 0) AS inserted
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT CASE WHEN seeded.inserted THEN 'schedule.declared' ELSE 'schedule.redeclared' END, 'agents-file',
           jsonb_build_object('schedule_id', seeded.id, 'name', %(name)s::text, 'agent', %(agent)s::text,
                              'cron', %(cron)s::text, 'timezone', %(timezone)s::text)
      FROM seeded
)
SELECT id, inserted FROM seeded

-- name: list
SELECT id, name, agent, cron, timezone, input, next_fire_at, created_by, created_at
  FROM schedules
 WHERE deleted_at IS NULL
 ORDER BY created_at, id

-- name: get
SELECT id, name, agent, cron, timezone, input, next_fire_at, created_by, created_at
  FROM schedules
 WHERE id = %(id)s AND deleted_at IS NULL

-- name: delete
-- A deleted schedule fires no more; it and its fires are kept for the record.
WITH gone AS (
    UPDATE schedules SET deleted_at = now(), deleted_by = %(by)s
     WHERE id = %(id)s AND deleted_at IS NULL
    RETURNING id, name, agent, cron, timezone, input, next_fire_at, created_by, created_at
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'schedule.deleted', %(by)s, jsonb_build_object('schedule_id', gone.id, 'name', gone.name) FROM gone
)
SELECT * FROM gone

-- name: due
-- The leader's one query per check: live schedules whose next fire time has come (through
-- schedules_due), and fires whose leader died between recording them and making their run (through
-- schedule_fires_unmade). `now` is the database clock unless a test gives one.
WITH clock AS (
    SELECT coalesce(%(now)s::timestamptz, now()) AS now
)
(SELECT 'due' AS kind, s.id, s.name, s.agent, s.cron, s.timezone, s.input, s.next_fire_at, s.created_by,
        NULL::timestamptz AS fire_at, NULL::text AS run_key, clock.now
   FROM schedules s, clock
  WHERE s.deleted_at IS NULL AND s.next_fire_at <= clock.now
  ORDER BY s.next_fire_at
  LIMIT %(limit)s)
UNION ALL
(SELECT 'unmade', s.id, s.name, s.agent, s.cron, s.timezone, s.input, s.next_fire_at, s.created_by,
        f.fire_at, f.run_key, clock.now
   FROM schedule_fires f JOIN schedules s ON s.id = f.schedule_id, clock
  WHERE f.run_id IS NULL AND f.reason IS NULL
  ORDER BY f.fired_at
  LIMIT %(limit)s)

-- name: fire
-- One due schedule fired (or its missed time recorded as skipped) and moved on to its next fire time,
-- never back. The fire row is unique per (schedule, fire time): inserted by one leader only, and the
-- row it returns is that leader's to make the run of. A schedule deleted meanwhile fires nothing.
WITH moved AS (
    UPDATE schedules SET next_fire_at = greatest(next_fire_at, %(next_fire_at)s)
     WHERE id = %(schedule_id)s AND deleted_at IS NULL
    RETURNING id
), fired AS (
    INSERT INTO schedule_fires (schedule_id, fire_at, run_key, skipped, reason, fired_by)
    SELECT moved.id, %(fire_at)s, %(run_key)s, %(skipped)s, %(reason)s, %(holder)s
      FROM moved
     WHERE %(fire_at)s::timestamptz IS NOT NULL
    ON CONFLICT DO NOTHING
    RETURNING fire_at, run_key, skipped
)
SELECT fire_at, run_key, skipped FROM fired

-- name: link_run
-- The run the fire made, recorded on it (its idempotency key is the fire's run_key).
UPDATE schedule_fires SET run_id = %(run_id)s WHERE run_key = %(run_key)s AND run_id IS NULL

-- name: fire_failed
-- A fire that cannot make its run (its agent is no longer defined) is failed with the reason.
UPDATE schedule_fires SET reason = %(reason)s WHERE run_key = %(run_key)s AND run_id IS NULL AND reason IS NULL

-- name: record_outcome
-- The cron hand-on (I12): the fire this run was made for records the run's answer, once. Fenced by the
-- attempt (I3): no row when the run was taken over. `recorded` is false when an earlier attempt
-- recorded it (the hook runs again when a takeover hands on a kept answer); `fire` false when no
-- schedule fire made this run (a failed fire made none: a run under its key it refused records nothing).
WITH fence AS (
    SELECT c.run_id, r.idempotency_key FROM checkpoints c JOIN runs r ON r.id = c.run_id
     WHERE c.run_id = %(run_id)s AND c.attempt = %(attempt)s
       FOR SHARE OF c
), recorded AS (
    UPDATE schedule_fires f
       SET outcome = %(answer)s, outcome_at = now(), outcome_attempt = %(attempt)s, run_id = fence.run_id
      FROM fence
     WHERE f.run_key = fence.idempotency_key AND f.outcome_at IS NULL AND f.reason IS NULL
    RETURNING f.run_key
)
SELECT fence.run_id, EXISTS (SELECT 1 FROM recorded) AS recorded,
       EXISTS (SELECT 1 FROM schedule_fires f WHERE f.run_key = fence.idempotency_key AND f.reason IS NULL) AS fire
  FROM fence

-- name: fires
-- A schedule's fires, newest first. Status, and the reason of a failed one, are its run's (a run fails
-- by many statements; the fire reads the one truth instead of a copy); the outcome is what the run's
-- hand-on recorded.
SELECT f.fire_at, f.fired_at, f.run_id,
       CASE WHEN f.skipped THEN 'skipped'
            WHEN f.reason IS NOT NULL THEN 'failed'
            WHEN r.id IS NULL THEN 'firing'
            ELSE r.status END AS status,
       f.outcome, f.outcome_at, coalesce(f.reason, r.error) AS reason
  FROM schedule_fires f LEFT JOIN runs r ON r.id = f.run_id
 WHERE f.schedule_id = %(schedule_id)s
 ORDER BY f.fire_at DESC
 LIMIT %(limit)s
