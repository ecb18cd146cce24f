-- Webhook triggers, their secrets and deliveries; Jira ticket events. A secret's clear text never
-- reaches a statement: only its ciphertext (see migration 011). "Active" is judged by the database
-- clock: not retired, and its expiry (if any) still ahead.

-- name: create
-- The trigger, its first secret (n = 1) and the audit row in one statement. A name in use inserts
-- nothing and returns no row.
WITH made AS (
    INSERT INTO triggers (name, agent, created_by)
    VALUES (%(name)s, %(agent)s, %(actor)s)
    ON CONFLICT DO NOTHING
    RETURNING name, agent
), secret AS (
    INSERT INTO trigger_secrets (trigger, n, key_id, nonce, ciphertext, created_by)
    SELECT made.name, 1, %(key_id)s, %(nonce)s, %(ciphertext)s, %(actor)s FROM made
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'trigger.created', %(actor)s, jsonb_build_object('trigger', made.name, 'agent', made.agent, 'secret', 1)
      FROM made
)
SELECT name FROM made

-- name: shown
-- Triggers as people see them (one row per secret; never a secret): every trigger, or the one named.
SELECT t.name, t.agent, t.created_by, t.created_at,
       s.n, s.created_by AS secret_created_by, s.created_at AS secret_created_at, s.expires_at, s.retired_at,
       s.retired_by, (s.retired_at IS NULL AND (s.expires_at IS NULL OR s.expires_at > now())) AS active
  FROM triggers t
  LEFT JOIN trigger_secrets s ON s.trigger = t.name
 WHERE %(name)s::text IS NULL OR t.name = %(name)s
 ORDER BY t.created_at, t.name, s.n

-- name: lock
-- Taken first by a change of a trigger's secrets: two changes of one trigger are ordered, so the count
-- of active secrets the second reads includes what the first added.
SELECT name FROM triggers WHERE name = %(name)s FOR UPDATE

-- name: secrets_of
SELECT n, (retired_at IS NULL AND (expires_at IS NULL OR expires_at > now())) AS active, retired_at, expires_at
  FROM trigger_secrets
 WHERE trigger = %(name)s
 ORDER BY n

-- name: add_secret
-- A new secret, active at once. With `expire_others_in_s`, the secrets active until now expire that
-- many seconds from now (never later than an expiry they already had). One statement, with its audit.
WITH added AS (
    INSERT INTO trigger_secrets (trigger, n, key_id, nonce, ciphertext, created_by)
    VALUES (%(name)s, %(n)s, %(key_id)s, %(nonce)s, %(ciphertext)s, %(actor)s)
    RETURNING trigger, n
), expiring AS (
    UPDATE trigger_secrets s
       SET expires_at = now() + make_interval(secs => %(expire_others_in_s)s::float8)
     WHERE s.trigger = %(name)s AND %(expire_others_in_s)s::float8 IS NOT NULL
       AND s.retired_at IS NULL
       AND (s.expires_at IS NULL OR s.expires_at > now() + make_interval(secs => %(expire_others_in_s)s::float8))
    RETURNING s.n
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'trigger.secret_added', %(actor)s,
           jsonb_build_object('trigger', added.trigger, 'secret', added.n,
                              'expiring', (SELECT coalesce(jsonb_agg(n ORDER BY n), '[]'::jsonb) FROM expiring),
                              'expire_others_in_s', %(expire_others_in_s)s::float8)
      FROM added
)
SELECT n FROM added

-- name: retire_secret
-- Retired at once: the next delivery signed with it is refused. No row when it was retired already.
WITH retired AS (
    UPDATE trigger_secrets SET retired_at = now(), retired_by = %(actor)s
     WHERE trigger = %(name)s AND n = %(n)s AND retired_at IS NULL
    RETURNING trigger, n
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'trigger.secret_retired', %(actor)s, jsonb_build_object('trigger', retired.trigger, 'secret', retired.n)
      FROM retired
)
SELECT n FROM retired

-- name: signing
-- What a delivery is checked with: the database clock, the trigger's agent and its active secrets.
-- Always one row at least (agent NULL for an unknown trigger), so an unknown trigger is checked like a
-- known one.
SELECT extract(epoch FROM now())::float8 AS now_s, t.agent, s.n, s.key_id, s.nonce, s.ciphertext
  FROM (SELECT 1) AS one
  LEFT JOIN triggers t ON t.name = %(name)s
  LEFT JOIN trigger_secrets s
         ON s.trigger = t.name AND s.retired_at IS NULL AND (s.expires_at IS NULL OR s.expires_at > now())
 ORDER BY s.n

-- name: delivery
SELECT run_id FROM trigger_deliveries WHERE trigger = %(name)s AND delivery_id = %(delivery_id)s

-- name: record_delivery
-- No row when the delivery was recorded already (a concurrent redelivery): read it with `delivery`.
INSERT INTO trigger_deliveries (trigger, delivery_id, run_id)
VALUES (%(name)s, %(delivery_id)s, %(run_id)s)
ON CONFLICT DO NOTHING
RETURNING run_id

-- name: ticket_event_runs
-- The runs an event started: by its identifier, or by its body (a signed body replayed under another
-- identifier).
SELECT event_id, agent, run_id FROM ticket_events
 WHERE event_id = %(event_id)s OR body_sha256 = %(body_sha256)s
 ORDER BY received_at, event_id, agent

-- name: ticket_event_run
SELECT run_id FROM ticket_events WHERE event_id = %(event_id)s AND agent = %(agent)s

-- name: record_ticket_event
-- No row when (event, agent) was recorded already: read it with `ticket_event_run`.
INSERT INTO ticket_events (event_id, agent, run_id, webhook_event, issue_key, body_sha256)
VALUES (%(event_id)s, %(agent)s, %(run_id)s, %(webhook_event)s, %(issue_key)s, %(body_sha256)s)
ON CONFLICT DO NOTHING
RETURNING run_id
