-- The vendor stand-ins' statements (schema `standin`). Windows are judged by the database clock.

-- name: lock_schema
-- Two stand-ins starting on one database must not race their CREATE ... IF NOT EXISTS.
SELECT pg_advisory_xact_lock(7600320841)

-- name: claim
-- Claims a dedupe key for `ref`, or takes over a claim whose window has passed. No row back: a live
-- claim exists (a concurrent claimer waits here until the first one's transaction ends).
INSERT INTO standin.dedupe AS d (vendor, scope, key, ref, fingerprint, expires_at)
VALUES (
    %(vendor)s, %(scope)s, %(key)s, %(ref)s, %(fingerprint)s,
    CASE WHEN %(window_s)s::float8 = 'Infinity'::float8 THEN 'infinity'::timestamptz
         ELSE now() + %(window_s)s::float8 * interval '1 second' END
)
ON CONFLICT (vendor, scope, key) DO UPDATE
    SET ref = EXCLUDED.ref, fingerprint = EXCLUDED.fingerprint,
        claimed_at = now(), expires_at = EXCLUDED.expires_at
    WHERE d.expires_at <= now()
RETURNING ref, fingerprint

-- name: claimed
SELECT ref, fingerprint
FROM standin.dedupe
WHERE vendor = %(vendor)s AND scope = %(scope)s AND key = %(key)s

-- name: record_write
INSERT INTO standin.writes (vendor, operation, target, key, effect, status, ref, body, client)
VALUES (%(vendor)s, %(operation)s, %(target)s, %(key)s, %(effect)s, %(status)s, %(ref)s, %(body)s, %(client)s)

-- name: writes
SELECT id, vendor, operation, target, key, effect, status, ref, body, received_at
FROM standin.writes
WHERE (%(vendor)s::text IS NULL OR vendor = %(vendor)s::text)
  AND (%(operation)s::text IS NULL OR operation = %(operation)s::text)
  AND (%(target)s::text IS NULL OR target = %(target)s::text)
  AND (%(key)s::text IS NULL OR key = %(key)s::text)
  AND (%(effect)s::text IS NULL OR effect = %(effect)s::text)
ORDER BY id

-- name: incident_insert
INSERT INTO standin.incidents (id, name, summary, severity_id, status_id, mode, visibility)
VALUES (%(id)s, %(name)s, %(summary)s, %(severity_id)s, %(status_id)s, %(mode)s, %(visibility)s)
RETURNING seq, id, name, summary, severity_id, status_id, mode, visibility, created_at, updated_at

-- name: incident_get
SELECT seq, id, name, summary, severity_id, status_id, mode, visibility, created_at, updated_at
FROM standin.incidents
WHERE id = %(id)s

-- name: incident_list
-- Newest first; `after` is the id of the last incident of the previous page.
SELECT seq, id, name, summary, severity_id, status_id, mode, visibility, created_at, updated_at
FROM standin.incidents
WHERE mode = ANY (%(modes)s::text[])
  AND (%(created_gte)s::timestamptz IS NULL OR created_at >= %(created_gte)s::timestamptz)
  AND (%(after)s::text IS NULL OR seq < (SELECT i.seq FROM standin.incidents i WHERE i.id = %(after)s::text))
ORDER BY seq DESC
LIMIT %(limit)s

-- name: incident_edit
-- Set semantics: a field not given (NULL) keeps its value.
UPDATE standin.incidents
SET name = COALESCE(%(name)s::text, name),
    summary = COALESCE(%(summary)s::text, summary),
    severity_id = COALESCE(%(severity_id)s::text, severity_id),
    status_id = COALESCE(%(status_id)s::text, status_id),
    updated_at = now()
WHERE id = %(id)s
RETURNING seq, id, name, summary, severity_id, status_id, mode, visibility, created_at, updated_at

-- name: jira_issue
-- An issue exists on first sight. DO UPDATE (not DO NOTHING) so that a row comes back even when a
-- concurrent first sight inserted it after this statement's snapshot was taken.
INSERT INTO standin.jira_issues AS i (key) VALUES (%(key)s)
ON CONFLICT (key) DO UPDATE SET key = i.key
RETURNING key, id, status

-- name: jira_transition
-- A transition leads to every status but its own target, so a replay after it landed matches no row.
UPDATE standin.jira_issues
SET status = %(to)s
WHERE key = %(key)s AND status <> %(to)s
RETURNING key, id, status

-- name: jira_comment_insert
INSERT INTO standin.jira_comments (issue_key, body, properties)
VALUES (%(issue_key)s, %(body)s, %(properties)s)
RETURNING id, issue_key, body, properties, created_at

-- name: jira_comments_count
SELECT count(*) AS total FROM standin.jira_comments WHERE issue_key = %(issue_key)s

-- name: jira_comments_page
SELECT id, issue_key, body, created_at
FROM standin.jira_comments
WHERE issue_key = %(issue_key)s
ORDER BY CASE WHEN %(newest_first)s::boolean THEN -id ELSE id END
OFFSET %(start)s
LIMIT %(limit)s

-- name: jira_comments_by_ids
SELECT id, issue_key, body, properties, created_at
FROM standin.jira_comments
WHERE id = ANY (%(ids)s::bigint[])
ORDER BY id

-- name: teams_reply_insert
INSERT INTO standin.teams_replies (channel_id, thread_id, activity)
VALUES (%(channel_id)s, %(thread_id)s, %(activity)s)
RETURNING seq, created_at

-- name: teams_replies_page
SELECT seq, activity, created_at
FROM standin.teams_replies
WHERE channel_id = %(channel_id)s AND thread_id = %(thread_id)s AND seq > %(after)s
ORDER BY seq
LIMIT %(limit)s

-- name: discord_message_insert
INSERT INTO standin.discord_messages (id, channel_id, author_id, nonce, content)
VALUES (%(id)s, %(channel_id)s, %(author_id)s, %(nonce)s, %(content)s)
RETURNING id, channel_id, author_id, nonce, content, created_at

-- name: discord_message_get
SELECT id, channel_id, author_id, nonce, content, created_at
FROM standin.discord_messages
WHERE id = %(id)s

-- name: discord_messages_list
-- Newest first, as Discord answers.
SELECT id, channel_id, author_id, nonce, content, created_at
FROM standin.discord_messages
WHERE channel_id = %(channel_id)s
  AND (%(before)s::bigint IS NULL OR id < %(before)s::bigint)
  AND (%(after)s::bigint IS NULL OR id > %(after)s::bigint)
ORDER BY id DESC
LIMIT %(limit)s

-- name: sqs_message_insert
INSERT INTO standin.sqs_messages (id, queue, group_id, deduplication_id, body)
VALUES (%(id)s, %(queue)s, %(group_id)s, %(deduplication_id)s, %(body)s)
RETURNING seq

-- name: sqs_message_get
SELECT seq, id FROM standin.sqs_messages WHERE id = %(id)s

-- name: webhook_delivery_insert
INSERT INTO standin.webhook_deliveries (id, path, idempotency_key, payload)
VALUES (%(id)s, %(path)s, %(idempotency_key)s, %(payload)s)

-- name: a2a_task_save
INSERT INTO standin.a2a_tasks AS t (owner, id, context_id, state, task)
VALUES (%(owner)s, %(id)s, %(context_id)s, %(state)s, %(task)s)
ON CONFLICT (owner, id) DO UPDATE
    SET context_id = EXCLUDED.context_id, state = EXCLUDED.state, task = EXCLUDED.task, updated_at = now()

-- name: a2a_task_get
SELECT task FROM standin.a2a_tasks WHERE owner = %(owner)s AND id = %(id)s

-- name: a2a_task_list
-- Newest change first; `after` keeps tasks whose status changed since (as the store saw it).
SELECT task, count(*) OVER () AS total
FROM standin.a2a_tasks
WHERE owner = %(owner)s
  AND (%(context_id)s::text IS NULL OR context_id = %(context_id)s::text)
  AND (%(state)s::text IS NULL OR state = %(state)s::text)
  AND (%(after)s::timestamptz IS NULL OR updated_at >= %(after)s::timestamptz)
ORDER BY updated_at DESC, id DESC
OFFSET %(offset)s
LIMIT %(limit)s

-- name: a2a_task_delete
DELETE FROM standin.a2a_tasks WHERE owner = %(owner)s AND id = %(id)s

-- name: record_model_request
INSERT INTO standin.model_requests (model, conversation, step, client)
VALUES (%(model)s, %(conversation)s, %(step)s, %(client)s)
RETURNING id

-- name: botframework_key
SELECT kid, private_pem FROM standin.botframework_keys WHERE kid = %(kid)s

-- name: botframework_key_offer
-- The first stand-in to make a key keeps it; another that made one at the same time reads this one.
INSERT INTO standin.botframework_keys (kid, private_pem) VALUES (%(kid)s, %(private_pem)s)
ON CONFLICT (kid) DO NOTHING
