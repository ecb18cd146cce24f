-- The Teams inbox (migration 010). A row's turn is the run whose idempotency key is its `run_key`.

-- name: lock_content
-- Taken first by the transaction that receives an activity: deliveries of the same content are decided
-- one after another, each seeing what the one before it stored.
SELECT true AS locked FROM (SELECT pg_advisory_xact_lock(hashtextextended(%(content_hash)s, 7310))) l

-- name: by_activity
-- The row a delivery of this activity stored before, and its turn's run: a redelivery is answered from
-- them, so they are made durable first (I20, migration 026).
SELECT i.id, i.reason, r.id AS run_id, durable() AS durable
  FROM teams_inbox i LEFT JOIN runs r ON r.idempotency_key = i.run_key
 WHERE i.conversation_id = %(conversation_id)s AND i.activity_id = %(activity_id)s

-- name: same_content
-- The latest activity with this content received within the window, by the database clock: the delivery
-- is dropped as its duplicate, so it is made durable first (I20, migration 026).
SELECT id, activity_id, durable() AS durable
  FROM teams_inbox
 WHERE content_hash = %(content_hash)s AND received_at > now() - make_interval(secs => %(window_s)s)
 ORDER BY received_at DESC
 LIMIT 1

-- name: insert
INSERT INTO teams_inbox (activity_id, conversation_id, content_hash, run_key, service_url, team_id, from_id,
                         from_name, actor, text, app_url, activity)
VALUES (%(activity_id)s, %(conversation_id)s, %(content_hash)s, %(run_key)s, %(service_url)s, %(team_id)s,
        %(from_id)s, %(from_name)s, %(actor)s, %(text)s, %(app_url)s, %(activity)s)
RETURNING id

-- name: set_run
UPDATE teams_inbox SET run_id = %(run_id)s WHERE id = %(id)s AND run_id IS NULL

-- name: refuse
-- No run can be made for the row (the agent it names is gone): said once, never tried again.
UPDATE teams_inbox SET reason = %(reason)s WHERE id = %(id)s AND run_id IS NULL AND reason IS NULL

-- name: unstarted
-- Rows whose process died after it stored them and before it made their run.
SELECT id, activity_id, conversation_id, run_key, actor, text
  FROM teams_inbox
 WHERE run_id IS NULL AND reason IS NULL AND received_at < now() - make_interval(secs => %(grace_s)s)
 ORDER BY received_at
 LIMIT %(limit)s

-- name: reply_target
-- Where the reply of a run's turn goes: the row whose run_key is the run's idempotency key.
SELECT i.id, i.activity_id, i.conversation_id, i.service_url, i.team_id, i.app_url
  FROM runs r JOIN teams_inbox i ON i.run_key = r.idempotency_key
 WHERE r.id = %(run_id)s

-- name: list
-- Newest first, before the row id `before` when given; with what the run says of the turn: its status,
-- its error and, once it succeeded, what its hand-on did with the reply (the audit of its end).
SELECT i.id, i.activity_id, i.conversation_id, i.from_id, i.from_name, i.text, i.received_at, i.reason,
       r.id AS run_id, r.status AS run_status, r.error AS run_error,
       (SELECT a.detail -> 'reply' FROM audit_log a
         WHERE a.run_id = r.id AND a.action = 'agent.run.succeeded'
         ORDER BY a.id DESC LIMIT 1) AS reply
  FROM teams_inbox i LEFT JOIN runs r ON r.idempotency_key = i.run_key
 WHERE %(before)s::bigint IS NULL OR i.id < %(before)s
 ORDER BY i.id DESC
 LIMIT %(limit)s
