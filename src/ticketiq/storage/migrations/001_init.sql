-- beside: previous
-- The run engine's schema: runs, their sealed checkpoints, leases, calls, transcripts, approvals,
-- the gates' state and the audit log.

CREATE TABLE runs (
    id                uuid PRIMARY KEY,
    agent             text NOT NULL,
    input             text NOT NULL,
    owner             text NOT NULL,
    tenant            text NOT NULL,
    channel           text NOT NULL,
    may_wait          boolean NOT NULL,
    correlation_id    text NOT NULL,
    parent_run_id     uuid REFERENCES runs (id),
    delegation_key    text UNIQUE,
    status            text NOT NULL DEFAULT 'queued'
                      CHECK (status IN ('queued', 'running', 'waiting', 'succeeded', 'failed', 'interrupted')),
    answer            text,
    error             text,
    idempotency_key   text UNIQUE,
    request_hash      text,
    stop_requested_at timestamptz,
    stopped_by        text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    started_at        timestamptz,
    finished_at       timestamptz
);
COMMENT ON TABLE runs IS
    'One agent working one request. What the run is and how it ended; its progress lives in checkpoints.';
CREATE INDEX runs_status ON runs (status) WHERE status IN ('queued', 'running', 'waiting');
CREATE INDEX runs_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE checkpoints (
    run_id     uuid PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    step       integer NOT NULL DEFAULT 0,
    losses     integer NOT NULL DEFAULT 0,
    state      text NOT NULL,
    seal       text NOT NULL,
    key_id     text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE checkpoints IS
    'The run''s durable state, one row per run, rewritten in one statement after each model step (I1). '
    '`attempt` is the fencing token (I3): every statement about the run matches it. `state` is the '
    'canonical JSON text exactly as sealed (cast to jsonb to query it); `seal` is HMAC-SHA256 over the '
    'run id, the step and that text, signed with key `key_id`.';
-- Stored out of line without compression: the state is rewritten every step and compressing it costs
-- more time than the disk it saves for one row per run.
ALTER TABLE checkpoints ALTER COLUMN state SET STORAGE EXTERNAL;

CREATE TABLE leases (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE leases IS
    'Who executes what: `checkpoint:<run id>` held by a process identity (fresh per start), renewed by '
    'one statement per process every ~2 s, lapsed when expires_at < now() by the database clock (I4).';
CREATE INDEX leases_holder ON leases (holder);
CREATE INDEX leases_expires ON leases (expires_at);

CREATE TABLE calls (
    run_id           uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step             integer NOT NULL,
    idx              integer NOT NULL,
    attempt          integer NOT NULL,
    provider_call_id text NOT NULL,
    tool             text NOT NULL,
    class            text NOT NULL
                     CHECK (class IN ('read', 'write', 'keyed_write', 'delegation', 'remote_agent', 'subagent')),
    step_key         text,
    sent_key         text,
    args             jsonb NOT NULL,
    gate             text,
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'in_doubt', 'done', 'settled')),
    outcome          jsonb,
    settlement       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step, idx)
);
COMMENT ON TABLE calls IS
    'One row per tool call of a step. A changing call''s row is inserted in_doubt by the one statement '
    'that marks it just before it is sent (I2) and set done when its outcome is recorded; `class` is '
    'fixed at the mark (I10). Reads and refused calls land done, with their outcome, in the next '
    'statement the run writes anyway, so they cost no statement of their own. '
    '`step_key` is derived (I11); `sent_key` is what was actually sent (the step key, an approval key, or '
    'a fresh key where none derives). `settled` rows were decided by a resume (I9).';

CREATE TABLE transcripts (
    id     bigserial PRIMARY KEY,
    run_id uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at     timestamptz NOT NULL DEFAULT now(),
    kind   text NOT NULL,
    body   jsonb NOT NULL
);
COMMENT ON TABLE transcripts IS
    'What a person reads of a run, in order: model steps, calls with class and key, gate decisions, '
    'statements written, outcomes, the answer. A row of kind `entries` carries several entries that one '
    'statement wrote ({"entries": [...]}). Never holds secrets.';
CREATE INDEX transcripts_run ON transcripts (run_id, id);

CREATE TABLE approvals (
    id          uuid PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step        integer NOT NULL,
    idx         integer NOT NULL,
    tool        text NOT NULL,
    args        jsonb NOT NULL,
    step_key    text,
    status      text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approved', 'rejected')),
    decided_by  text,
    reason      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    decided_at  timestamptz,
    UNIQUE (run_id, step, idx)
);
COMMENT ON TABLE approvals IS
    'A call held for a person''s decision. One request per call of a step: filing again coalesces with '
    'the waiting one; an approved call is sent with a key derived from the approval id (I11).';
CREATE INDEX approvals_pending ON approvals (created_at) WHERE status = 'pending';

CREATE TABLE audit_log (
    id     bigserial PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    action text NOT NULL,
    run_id uuid,
    actor  text NOT NULL,
    detail jsonb NOT NULL DEFAULT '{}'::jsonb
);
COMMENT ON TABLE audit_log IS
    'Append-only record of decisions and what people did: dotted nouns and past-tense verbs '
    '(agent.run.created, agent.run.crash_resumed, approval.decided).';
CREATE INDEX audit_log_run ON audit_log (run_id, id);

CREATE TABLE quarantines (
    kind   text NOT NULL CHECK (kind IN ('agent', 'tenant')),
    name   text NOT NULL,
    reason text NOT NULL DEFAULT '',
    at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, name)
);
COMMENT ON TABLE quarantines IS
    'Containment gate: an agent or a whole tenant whose calls are refused while a row is here.';

CREATE TABLE channels (
    name       text PRIMARY KEY,
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE channels IS
    'Channel gate: entry channels (api, playground, a2a, cron, teams, webhook); a channel without a row '
    'is enabled, one with enabled = false refuses the calls of runs that entered through it.';

CREATE TABLE principals (
    name       text PRIMARY KEY,
    may_run    boolean NOT NULL DEFAULT true,
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE principals IS
    'Run-as principals (agent owners). may_run = false: runs owned by it may not run or resume.';

CREATE TABLE grants (
    principal text NOT NULL REFERENCES principals (name) ON DELETE CASCADE,
    tool      text NOT NULL,
    revoked   boolean NOT NULL DEFAULT false,
    at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (principal, tool)
);
COMMENT ON TABLE grants IS
    'Run-as authority gate: the tools a principal may use. A call whose owner lacks an unrevoked grant '
    'is refused. Revoked grants stay as rows so seeding from the agents file never grants them again.';

CREATE TABLE tool_policies (
    tool           text PRIMARY KEY,
    needs_approval boolean NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE tool_policies IS
    'Approval gate: tools whose calls are held for a person''s decision before they are sent.';

-- Gate changes wake every process: each keeps the gate facts of its runs cached and drops them when
-- told, so a step does not read them again unless something changed (LISTEN ticketiq_gates).
CREATE FUNCTION notify_gates() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ticketiq_gates', TG_TABLE_NAME);
    RETURN NULL;
END
$$;
CREATE TRIGGER quarantines_changed AFTER INSERT OR UPDATE OR DELETE ON quarantines
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
CREATE TRIGGER channels_changed AFTER INSERT OR UPDATE OR DELETE ON channels
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
CREATE TRIGGER principals_changed AFTER INSERT OR UPDATE OR DELETE ON principals
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
CREATE TRIGGER grants_changed AFTER INSERT OR UPDATE OR DELETE ON grants
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
CREATE TRIGGER tool_policies_changed AFTER INSERT OR UPDATE OR DELETE ON tool_policies
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
CREATE TRIGGER runs_stop_requested AFTER UPDATE OF stop_requested_at ON runs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_gates();
