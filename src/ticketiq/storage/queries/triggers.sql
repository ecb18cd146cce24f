-- Webhook triggers, their secrets and deliveries; Jira ticket events. A secret's clear text never
-- reaches a statement: only its ciphertext (see migration 011). "Active" is judged by the database
-- clock: not retired, and its expiry (if any) still ahead.

-- name: create
-- The trigger, its first secret (n = 1) and the audit row in one statement. A name in use returns the
-- trigger only when the very request made it (its `request_key`, retried after a crash), made nothing
-- now and audited nothing; any other request naming it gets no row. I20: the found row is locked and
-- written, never only read.
WITH made AS (
    INSERT INTO triggers (name, agent, created_by, request_key)
    VALUES (%(name)s, %(agent)s, %(actor)s, %(request_key)s)
    ON CONFLICT (name) DO UPDATE SET request_key = triggers.request_key
     WHERE triggers.request_key = %(request_key)s::uuid
    RETURNING name, agent, (xmax = 0) AS inserted
), secret AS (
    INSERT INTO trigger_secrets (trigger, n, key_id, nonce, ciphertext, created_by)
    SELECT made.name, 1, %(key_id)s, %(nonce)s, %(ciphertext)s, %(actor)s FROM made WHERE made.inserted
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'trigger.created', %(actor)s, jsonb_build_object('trigger', made.name, 'agent', made.agent, 'secret', 1)
      FROM made WHERE made.inserted
)
SELECT name, inserted FROM made

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

-- name: secret_made_by
-- The secret the request with this key added (under the trigger's lock): a retry after a crash.
SELECT n FROM trigger_secrets WHERE trigger = %(name)s AND request_key = %(request_key)s::uuid

-- name: add_secret
-- A new secret, active at once. With `expire_others_in_s`, the secrets active until now expire that
-- many seconds from now (never later than an expiry they already had). One statement, with its audit.
WITH added AS (
    INSERT INTO trigger_secrets (trigger, n, key_id, nonce, ciphertext, created_by, request_key)
    VALUES (%(name)s, %(n)s, %(key_id)s, %(nonce)s, %(ciphertext)s, %(actor)s, %(request_key)s)
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
-- The run a delivery started, once recorded: a redelivery is answered with it (I20: durable first,
-- migration 026).
SELECT run_id, durable() AS durable
  FROM trigger_deliveries
 WHERE trigger = %(name)s AND delivery_id = %(delivery_id)s

-- name: record_delivery
-- No row when the delivery was recorded already (a concurrent redelivery): read it with `delivery`.
INSERT INTO trigger_deliveries (trigger, delivery_id, run_id)
VALUES (%(name)s, %(delivery_id)s, %(run_id)s)
ON CONFLICT DO NOTHING
RETURNING run_id

-- name: claim_signed
-- I19: what a signed request signed, bound to the delivery id it first came with; returns that id (this
-- request's, or the first copy's). A copy racing the first waits for it and gets its id. I20: a claim
-- found is locked and written, never only read.
-- `purged`: the run that delivery id started was purged by the retention pass (issue 34; a claim of it is
-- marked): it starts nothing again, whatever it was signed with.
WITH claimed AS (
    INSERT INTO signed_requests (source, digest, delivery_id, kept_until)
    VALUES (%(source)s, %(digest)s, %(delivery_id)s, to_timestamp(%(kept_until_s)s::float8))
    ON CONFLICT (source, digest) DO UPDATE SET delivery_id = signed_requests.delivery_id
    RETURNING delivery_id
)
SELECT c.delivery_id,
       EXISTS (SELECT 1 FROM signed_requests s
                WHERE s.source = %(source)s AND s.delivery_id = c.delivery_id AND s.run_purged_at IS NOT NULL) AS purged
  FROM claimed c

-- name: ticket_event_runs
-- The runs an event started, by its identifier: an agent found here is not started again (I20: durable
-- first, migration 026).
SELECT event_id, agent, run_id, durable() AS durable FROM ticket_events
 WHERE event_id = %(event_id)s
 ORDER BY received_at, agent

-- name: ticket_event_run
-- The run an event started for an agent, read when recording it found it recorded (I20: durable first).
SELECT run_id, durable() AS durable FROM ticket_events WHERE event_id = %(event_id)s AND agent = %(agent)s

-- name: record_ticket_event
-- No row when (event, agent) was recorded already: read it with `ticket_event_run`.
INSERT INTO ticket_events (event_id, agent, run_id, webhook_event, issue_key, body_sha256)
VALUES (%(event_id)s, %(agent)s, %(run_id)s, %(webhook_event)s, %(issue_key)s, %(body_sha256)s)
ON CONFLICT DO NOTHING
RETURNING run_id
