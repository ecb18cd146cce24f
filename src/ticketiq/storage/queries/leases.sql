-- name: renew
-- I4: every lease of a process in one statement; the answer lists the leases still ours.
-- Only the leases the process still drives: a lease its driver gave up lapses and is swept.
UPDATE leases SET expires_at = now() + make_interval(secs => %(ttl)s)
 WHERE holder = %(holder)s AND name IN (SELECT jsonb_array_elements_text(%(names)s))
RETURNING name

-- name: of_holder
SELECT name, expires_at FROM leases WHERE holder = %(holder)s ORDER BY name

-- name: take_up
-- The leases other processes' takes gave this one (claimed or started runs: migration 012), taken up:
-- each renewed from now and its mark cleared, fenced by the attempt it was given under (I3), so it is
-- taken up once. Runs a driver of this process still drives wait for the next look. Returns the
-- checkpoints to drive; a lease that lapsed first is the sweep's again.
WITH handed AS (
    SELECT l.name, l.handed_why AS why, l.handed_attempt AS attempt FROM leases l
     WHERE l.holder = %(holder)s AND l.handed_why IS NOT NULL AND l.expires_at >= now()
       AND substr(l.name, 12) NOT IN (SELECT jsonb_array_elements_text(%(driving)s))
       FOR UPDATE SKIP LOCKED
), given AS (
    SELECT c.run_id, c.attempt, c.step, c.losses, c.state, c.seal, c.key_id, c.prev_seal, c.sealed_attempt,
           c.sealed_losses, c.seal_format, c.state_format, handed.why, handed.name
      FROM handed JOIN checkpoints c ON c.run_id = substr(handed.name, 12)::uuid AND c.attempt = handed.attempt
), taken AS (
    UPDATE leases l
       SET handed_why = NULL, handed_attempt = NULL, expires_at = now() + make_interval(secs => %(ttl)s)
      FROM given
     WHERE l.name = given.name
    RETURNING l.name
)
SELECT given.* FROM given JOIN taken USING (name)
