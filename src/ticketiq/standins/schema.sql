-- The vendor stand-ins' state, in its own schema beside the engine's: every write they received, the
-- keys they dedupe on, and each vendor's objects, so read-backs work across restarts of the stand-in.
-- Applied at every start; every statement is idempotent.

CREATE SCHEMA IF NOT EXISTS standin;

CREATE TABLE IF NOT EXISTS standin.writes (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    vendor      text NOT NULL,
    operation   text NOT NULL,
    target      text NOT NULL,
    key         text,
    effect      text NOT NULL CHECK (effect IN ('applied', 'deduped', 'refused')),
    status      integer NOT NULL,
    ref         text,
    body        jsonb NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.writes IS
    'Every write request a stand-in received, one row each: `applied` (it took effect), `deduped` (a '
    'repeat of a key the vendor dedupes on: no new effect) or `refused` (answered an error, no effect). '
    '`key` is what the request carried to be found or deduped by; `ref` the object it made or matched.';
CREATE INDEX IF NOT EXISTS writes_vendor_target ON standin.writes (vendor, target);
CREATE INDEX IF NOT EXISTS writes_key ON standin.writes (key);

CREATE TABLE IF NOT EXISTS standin.dedupe (
    vendor      text NOT NULL,
    scope       text NOT NULL,
    key         text NOT NULL,
    ref         text NOT NULL,
    fingerprint text NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (vendor, scope, key)
);
COMMENT ON TABLE standin.dedupe IS
    'Keys a vendor dedupes on, until expires_at by the database clock: the first write claims the key '
    'with the id of what it made (`ref`); a repeat inside the window is answered with that object.';

CREATE TABLE IF NOT EXISTS standin.incidents (
    seq         bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    id          text PRIMARY KEY,
    name        text NOT NULL,
    summary     text,
    severity_id text,
    status_id   text NOT NULL,
    mode        text NOT NULL,
    visibility  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.incidents IS 'incident.io stand-in: incidents.';

CREATE TABLE IF NOT EXISTS standin.jira_issues (
    key    text PRIMARY KEY,
    id     bigint GENERATED ALWAYS AS IDENTITY (START WITH 10000) UNIQUE,
    status text NOT NULL DEFAULT 'To Do'
);
COMMENT ON TABLE standin.jira_issues IS 'Jira stand-in: every issue key exists on first sight, in To Do.';

CREATE TABLE IF NOT EXISTS standin.jira_comments (
    id         bigint GENERATED ALWAYS AS IDENTITY (START WITH 10000) PRIMARY KEY,
    issue_key  text NOT NULL,
    body       jsonb NOT NULL,
    properties jsonb NOT NULL DEFAULT '[]',
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.jira_comments IS 'Jira stand-in: comments, with the properties set at create.';
CREATE INDEX IF NOT EXISTS jira_comments_issue ON standin.jira_comments (issue_key, id);

-- Issue 10: a project's issues can be generated in bulk (with text and labels) and searched by JQL,
-- paged in issue-number order. Issues first seen by key have no stored text (it derives from the key).
ALTER TABLE standin.jira_issues
    ADD COLUMN IF NOT EXISTS project text GENERATED ALWAYS AS (split_part(key, '-', 1)) STORED,
    ADD COLUMN IF NOT EXISTS number numeric GENERATED ALWAYS AS (split_part(key, '-', 2)::numeric) STORED,
    ADD COLUMN IF NOT EXISTS summary text,
    ADD COLUMN IF NOT EXISTS description text,
    ADD COLUMN IF NOT EXISTS labels text[] NOT NULL DEFAULT '{}',
    ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN IF NOT EXISTS updated_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX IF NOT EXISTS jira_issues_project ON standin.jira_issues (project, number);

CREATE TABLE IF NOT EXISTS standin.teams_replies (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    channel_id text NOT NULL,
    thread_id  text NOT NULL,
    activity   jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.teams_replies IS
    'Teams stand-in: replies posted through the Bot Framework into a channel thread, read back by Graph.';
CREATE INDEX IF NOT EXISTS teams_replies_thread ON standin.teams_replies (channel_id, thread_id, seq);

CREATE TABLE IF NOT EXISTS standin.discord_messages (
    id         bigint PRIMARY KEY,
    channel_id text NOT NULL,
    author_id  text NOT NULL,
    nonce      text,
    content    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.discord_messages IS 'Discord stand-in: messages; `id` is a snowflake.';
CREATE INDEX IF NOT EXISTS discord_messages_channel ON standin.discord_messages (channel_id, id);

CREATE TABLE IF NOT EXISTS standin.sqs_messages (
    seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id               text NOT NULL UNIQUE,
    queue            text NOT NULL,
    group_id         text NOT NULL,
    deduplication_id text NOT NULL,
    body             text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.sqs_messages IS 'SQS FIFO stand-in: messages enqueued (a deduped send adds none).';

CREATE TABLE IF NOT EXISTS standin.webhook_deliveries (
    id              text PRIMARY KEY,
    path            text NOT NULL,
    idempotency_key text,
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.webhook_deliveries IS 'Generic webhook stand-in: deliveries that took effect.';

CREATE TABLE IF NOT EXISTS standin.a2a_tasks (
    owner      text NOT NULL,
    id         text NOT NULL,
    context_id text NOT NULL,
    state      text NOT NULL,
    task       jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, id)
);
COMMENT ON TABLE standin.a2a_tasks IS
    'Remote A2A agent stand-in: its tasks (the a2a-sdk TaskStore), each as the protocol''s JSON, so '
    'GetTask answers across restarts of the stand-in.';
CREATE INDEX IF NOT EXISTS a2a_tasks_updated ON standin.a2a_tasks (owner, updated_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS standin.model_requests (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model        text NOT NULL,
    conversation text NOT NULL,
    step         integer NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.model_requests IS
    'Every chat completion the model stand-in answered: the script, the conversation (a hash of its first '
    'user message) and the step asked for (assistant messages already in it). A step asked twice for one '
    'conversation is a model step asked again.';
CREATE INDEX IF NOT EXISTS model_requests_conversation ON standin.model_requests (conversation, step);

CREATE TABLE IF NOT EXISTS standin.botframework_keys (
    kid         text PRIMARY KEY,
    private_pem text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.botframework_keys IS
    'Bot Framework token service stand-in: the RSA key it signs tokens with, made on first use and kept '
    'so restarts of the stand-ins sign with the same key (its public half is served as the JWKS).';

CREATE TABLE IF NOT EXISTS standin.token_grants (
    seq          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant       text NOT NULL,
    client_id    text,
    scope        text,
    status       integer NOT NULL,
    error        text,
    access_token text UNIQUE,
    expires_at   timestamptz,
    requested_at timestamptz NOT NULL DEFAULT now(),
    client       text
);
COMMENT ON TABLE standin.token_grants IS
    'Microsoft identity platform stand-in: every client-credentials token request (never its secret), the '
    'OAuth error it got or the token it was granted, good until `expires_at` by the database clock; the '
    'Bot Connector and Graph stand-ins take a bearer token only while it is here, live, for their scope.';

-- Who sent each request: its User-Agent (the engine names its pid there), so a trial can tell which
-- process made a call. Added after the tables above existed, hence ALTER ... IF NOT EXISTS.
ALTER TABLE standin.writes ADD COLUMN IF NOT EXISTS client text;
ALTER TABLE standin.model_requests ADD COLUMN IF NOT EXISTS client text;
COMMENT ON COLUMN standin.writes.client IS 'The User-Agent of the request (the engine names its pid in it).';
COMMENT ON COLUMN standin.model_requests.client IS 'The User-Agent of the request (the engine names its pid in it).';

-- The W3C traceparent each request carried: the span of the call that sent it (the engine's traces).
ALTER TABLE standin.writes ADD COLUMN IF NOT EXISTS traceparent text;
ALTER TABLE standin.model_requests ADD COLUMN IF NOT EXISTS traceparent text;
COMMENT ON COLUMN standin.writes.traceparent IS 'The traceparent header of the request, if it had one.';
COMMENT ON COLUMN standin.model_requests.traceparent IS 'The traceparent header of the request, if it had one.';

CREATE TABLE IF NOT EXISTS standin.openai_files (
    seq        bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    id         text PRIMARY KEY,
    filename   text NOT NULL,
    purpose    text NOT NULL,
    bytes      integer NOT NULL,
    content    bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.openai_files IS 'OpenAI stand-in: uploaded files (fine_tuning.py).';

CREATE TABLE IF NOT EXISTS standin.fine_tuning_jobs (
    seq              bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    id               text PRIMARY KEY,
    model            text NOT NULL,
    training_file    text NOT NULL,
    validation_file  text,
    suffix           text,
    metadata         jsonb,
    seed             integer NOT NULL,
    duration_s       float8 NOT NULL,
    failure          jsonb,
    examples         integer NOT NULL,
    fine_tuned_model text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    cancelled_at     timestamptz
);
COMMENT ON TABLE standin.fine_tuning_jobs IS
    'OpenAI stand-in: fine-tuning jobs. A job keeps no timer: its status is read from how long ago it was '
    'created (database clock) against `duration_s`; `failure` is the error it fails with once validated '
    '(null: it succeeds, named `fine_tuned_model`); `cancelled_at` stops it where it was.';
CREATE INDEX IF NOT EXISTS fine_tuning_jobs_metadata ON standin.fine_tuning_jobs USING gin (metadata jsonb_path_ops);

-- Issue 33: the stand-in MCP server's notebook (vendors/mcp_notes.py), over Streamable HTTP at /mcp and stdio.
CREATE TABLE IF NOT EXISTS standin.mcp_notes (
    note_id    text PRIMARY KEY,
    notebook   text,
    text       text NOT NULL,
    archived   boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE standin.mcp_notes IS
    'MCP stand-in: notes. `notebook` is set by add_note (a note made by set_note belongs to none).';
