-- The vendor stand-ins' statements (schema `standin`). Windows are judged by the database clock.

-- name: lock_schema
-- Two stand-ins starting on one database must not race their CREATE ... IF NOT EXISTS.
SELECT pg_advisory_xact_lock(7600320841)

-- name: schema_version
-- The version of the schema applied (records.SCHEMA_VERSION), kept as the schema's comment.
SELECT obj_description(oid, 'pg_namespace') AS version FROM pg_namespace WHERE nspname = 'standin'

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
INSERT INTO standin.writes (vendor, operation, target, key, effect, status, ref, body, client, traceparent)
VALUES (%(vendor)s, %(operation)s, %(target)s, %(key)s, %(effect)s, %(status)s, %(ref)s, %(body)s, %(client)s,
        %(traceparent)s)

-- name: writes
SELECT id, vendor, operation, target, key, effect, status, ref, body, received_at, traceparent
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
RETURNING key, id, status, summary, description, labels, created_at, updated_at

-- name: jira_transition
-- A transition leads to every status but its own target, so a replay after it landed matches no row.
UPDATE standin.jira_issues
SET status = %(to)s, updated_at = now()
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

-- name: jira_generate
-- Generated issues fill in what a first sight left without text; a status moved since is kept.
WITH made AS (
    INSERT INTO standin.jira_issues AS i (key, status, summary, description, labels, created_at, updated_at)
    SELECT g.key, g.status, g.summary, g.description, g.labels, g.created_at, g.created_at
    FROM jsonb_to_recordset(%(issues)s::jsonb)
        AS g (key text, status text, summary text, description text, labels text[], created_at timestamptz)
    ON CONFLICT (key) DO UPDATE
    SET summary = excluded.summary, description = excluded.description, labels = excluded.labels,
        created_at = excluded.created_at
    RETURNING 1
)
SELECT count(*) AS made FROM made

-- name: jira_search_asc
-- One page more than asked: the extra row says whether another page follows.
SELECT key, id, number, status, summary, description, labels, created_at, updated_at
FROM standin.jira_issues
WHERE project = %(project)s AND number > %(after)s
ORDER BY number
LIMIT %(limit)s + 1

-- name: jira_search_desc
SELECT key, id, number, status, summary, description, labels, created_at, updated_at
FROM standin.jira_issues
WHERE project = %(project)s AND (%(after)s::numeric = 0 OR number < %(after)s)
ORDER BY number DESC
LIMIT %(limit)s + 1

-- name: jira_count
SELECT count(*) AS count FROM standin.jira_issues WHERE project = %(project)s

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
INSERT INTO standin.model_requests (model, conversation, step, client, traceparent)
VALUES (%(model)s, %(conversation)s, %(step)s, %(client)s, %(traceparent)s)
RETURNING id

-- name: botframework_key
SELECT kid, private_pem FROM standin.botframework_keys WHERE kid = %(kid)s

-- name: botframework_key_offer
-- The first stand-in to make a key keeps it; another that made one at the same time reads this one.
INSERT INTO standin.botframework_keys (kid, private_pem) VALUES (%(kid)s, %(private_pem)s)
ON CONFLICT (kid) DO NOTHING

-- name: token_grant_record
-- A token request and its answer; a granted token lasts `lifetime_s` from now (database clock).
INSERT INTO standin.token_grants (tenant, client_id, scope, status, error, access_token, expires_at, client)
VALUES (
    %(tenant)s, %(client_id)s, %(scope)s, %(status)s, %(error)s, %(access_token)s::text,
    CASE WHEN %(access_token)s::text IS NULL THEN NULL ELSE now() + %(lifetime_s)s::float8 * interval '1 second' END,
    %(client)s
)
RETURNING seq

-- name: token_grant_of
-- A bearer token as the Bot Connector and Graph stand-ins judge it: its scope and whether it still lasts.
SELECT scope, expires_at > now() AS live
FROM standin.token_grants
WHERE access_token = %(access_token)s

-- name: token_grants_expire
-- A test's "the tokens expire now": every granted token still live runs out at this moment.
UPDATE standin.token_grants SET expires_at = now() WHERE expires_at > now()
RETURNING seq

-- name: token_grants
SELECT seq, tenant, client_id, scope, status, error, access_token, expires_at, requested_at, client
FROM standin.token_grants
ORDER BY seq

-- name: openai_file_insert
INSERT INTO standin.openai_files (id, filename, purpose, bytes, content)
VALUES (%(id)s, %(filename)s, %(purpose)s, octet_length(%(content)s::bytea), %(content)s)
RETURNING seq, id, filename, purpose, bytes, extract(epoch FROM created_at)::float8 AS created_epoch

-- name: openai_file_get
SELECT seq, id, filename, purpose, bytes, content, extract(epoch FROM created_at)::float8 AS created_epoch
FROM standin.openai_files
WHERE id = %(id)s

-- name: openai_file_list
-- Newest first unless `asc`; `after` is the id of the last file of the previous page. One row past
-- the page is asked for, to tell `has_more`.
SELECT seq, id, filename, purpose, bytes, extract(epoch FROM created_at)::float8 AS created_epoch
FROM standin.openai_files
WHERE (%(purpose)s::text IS NULL OR purpose = %(purpose)s::text)
  AND (%(after)s::text IS NULL
       OR CASE WHEN %(asc)s::boolean
               THEN seq > (SELECT f.seq FROM standin.openai_files f WHERE f.id = %(after)s::text)
               ELSE seq < (SELECT f.seq FROM standin.openai_files f WHERE f.id = %(after)s::text) END)
ORDER BY CASE WHEN %(asc)s::boolean THEN seq ELSE -seq END
LIMIT %(limit)s

-- name: fine_tuning_job_insert
-- `elapsed_s` and `cancelled_after_s`: where the job stands on the database clock (fine_tuning.timeline).
INSERT INTO standin.fine_tuning_jobs (id, model, training_file, validation_file, suffix, metadata, seed, duration_s,
                                      failure, examples, fine_tuned_model)
VALUES (%(id)s, %(model)s, %(training_file)s, %(validation_file)s, %(suffix)s, %(metadata)s::jsonb, %(seed)s,
        %(duration_s)s, %(failure)s::jsonb, %(examples)s, %(fine_tuned_model)s)
RETURNING id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
          fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
          extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
          extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s

-- name: fine_tuning_job_get
SELECT id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
       fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
       extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
       extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s
FROM standin.fine_tuning_jobs
WHERE id = %(id)s

-- name: fine_tuning_job_lock
-- A cancel reads the job under its row lock, so two cancels of a running job answer one each in turn.
SELECT id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
       fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
       extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
       extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s
FROM standin.fine_tuning_jobs
WHERE id = %(id)s
FOR UPDATE

-- name: fine_tuning_job_list
-- Newest first, as OpenAI lists them; `after` is the id of the last job of the previous page;
-- `metadata` (jsonb) keeps the jobs whose metadata holds every pair of it; `no_metadata` those with none.
SELECT id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
       fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
       extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
       extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s
FROM standin.fine_tuning_jobs
WHERE (%(after)s::text IS NULL OR seq < (SELECT j.seq FROM standin.fine_tuning_jobs j WHERE j.id = %(after)s::text))
  AND (%(metadata)s::jsonb IS NULL OR metadata @> %(metadata)s::jsonb)
  AND (NOT %(no_metadata)s::boolean OR metadata IS NULL)
ORDER BY seq DESC
LIMIT %(limit)s

-- name: fine_tuning_job_cancel
UPDATE standin.fine_tuning_jobs
SET cancelled_at = now()
WHERE id = %(id)s AND cancelled_at IS NULL
RETURNING id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
          fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
          extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
          extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s

-- name: fine_tuning_job_finish
-- Admin: a job that is still running (not cancelled, its duration not over) ends now.
UPDATE standin.fine_tuning_jobs
SET duration_s = greatest(extract(epoch FROM now() - created_at)::float8, 1e-6),
    failure = coalesce(%(failure)s::jsonb, failure)
WHERE id = %(id)s AND cancelled_at IS NULL AND now() < created_at + duration_s * interval '1 second'
RETURNING id, model, training_file, validation_file, suffix, metadata, seed, duration_s, failure, examples,
          fine_tuned_model, extract(epoch FROM created_at)::float8 AS created_epoch,
          extract(epoch FROM now() - created_at)::float8 AS elapsed_s,
          extract(epoch FROM cancelled_at - created_at)::float8 AS cancelled_after_s

-- name: mcp_note_get
SELECT note_id, notebook, text, archived FROM standin.mcp_notes WHERE note_id = %(note_id)s

-- name: mcp_note_set
-- Creates the note or replaces its text; `created` tells which (xmax is 0 on a freshly inserted row).
INSERT INTO standin.mcp_notes AS n (note_id, text) VALUES (%(note_id)s, %(text)s)
ON CONFLICT (note_id) DO UPDATE SET text = EXCLUDED.text, updated_at = now()
RETURNING note_id, text, (xmax = 0) AS created

-- name: mcp_note_add
INSERT INTO standin.mcp_notes (note_id, notebook, text) VALUES (%(note_id)s, %(notebook)s, %(text)s)
RETURNING note_id, notebook, text

-- name: mcp_note_delete
DELETE FROM standin.mcp_notes WHERE note_id = %(note_id)s RETURNING note_id

-- name: mcp_note_archive
UPDATE standin.mcp_notes SET archived = true, updated_at = now()
WHERE note_id = %(note_id)s
RETURNING note_id, archived
