-- beside: previous
-- Issue 34: the retention pass (leader/retention.py, queries/retention.sql). Every statement it makes reads
-- an index: the ones below are what it needs that earlier migrations did not make. A run's rows in
-- tables that name it without cascading (ticket_events, trigger_deliveries, schedule_fires, teams_inbox,
-- workflow_steps, audit_log, idempotency_keys) are found by run_id; the policies' own clocks by their
-- time columns.
--
-- Two columns: `signed_requests.run_purged_at` marks the claim of a signed delivery whose run was purged,
-- so that the same delivery sent again while its signature is still valid is refused instead of
-- starting a run anew (the delivery's record went with its run); `idempotency_keys.run_id` names the run
-- an Idempotency-Key's kept answer points at, so the key goes with the run.
-- `retention_passes` records each pass: when, by whom, what it deleted (per table), for
-- `ticketiq retention status` and the console.
--
-- The previous release runs beside it: it never reads these columns or the new table, and its statements
-- name their columns; a key it answers has no run_id (kept to its TTL, as before), a claim it reads is
-- never marked while it serves (it runs no pass).
CREATE INDEX teams_inbox_run ON teams_inbox (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX teams_inbox_runless ON teams_inbox (received_at) WHERE run_id IS NULL AND reason IS NOT NULL;
CREATE INDEX ticket_events_run ON ticket_events (run_id);
CREATE INDEX trigger_deliveries_run ON trigger_deliveries (run_id);
CREATE INDEX workflow_steps_run ON workflow_steps (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX schedule_fires_runless ON schedule_fires (fired_at) WHERE run_id IS NULL AND reason IS NOT NULL;
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX classifiers_job ON classifiers (job_id);
-- The answers still to be handed on (I12), which keep their runs: a few at any time, among millions.
CREATE INDEX answers_to_hand_on ON answers (run_id) WHERE handed_on_at IS NULL;

ALTER TABLE signed_requests ADD COLUMN run_purged_at timestamptz;
COMMENT ON COLUMN signed_requests.run_purged_at IS 'When the run this signed delivery started was purged by the retention pass: the same delivery again is refused (its record went with the run), until the claim itself goes.';
CREATE INDEX signed_requests_delivery ON signed_requests (source, delivery_id);

ALTER TABLE idempotency_keys ADD COLUMN run_id uuid;
COMMENT ON COLUMN idempotency_keys.run_id IS 'The run the kept answer points at, when it points at one: the retention pass deletes the key with the run.';
CREATE INDEX idempotency_keys_run ON idempotency_keys (run_id) WHERE run_id IS NOT NULL;

-- The fence of the leader's retention pass, written once: the leader lease is the caller's, unexpired
-- (NULL: `ticketiq retention run`, which no leader runs).
CREATE FUNCTION retention_may_run(p_leader text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT p_leader IS NULL
        OR EXISTS (SELECT 1 FROM leases l WHERE l.name = 'leader' AND l.holder = p_leader AND l.expires_at > now())
$$;

CREATE TABLE retention_passes (
    id bigserial PRIMARY KEY,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at timestamptz,
    process text NOT NULL,
    dry_run boolean NOT NULL,
    deleted jsonb NOT NULL DEFAULT '{}'::jsonb,
    exported jsonb NOT NULL DEFAULT '[]'::jsonb,
    error text,
    CONSTRAINT retention_passes_deleted_check CHECK (jsonb_typeof(deleted) = 'object')
);
COMMENT ON TABLE retention_passes IS 'One row per retention pass (the leader''s, every TICKETIQ_RETENTION_EVERY, or `ticketiq retention run`): who ran it, when it began and ended, the rows it deleted per table (or would have, for a dry run), the export files it wrote, and the error that stopped it. The pass keeps the last 1,000.';
CREATE INDEX retention_passes_started ON retention_passes (started_at DESC);
