-- beside: previous
-- Entry points that survive a crash: runs that wait for input, kept answers and their hand-on (I12),
-- and the run events entry points follow.

-- A run whose model gave its final answer keeps it (sealed) and hands it on as a step of its own:
-- `answered` is that step, written ahead. The run still holds its lease, so a process that dies
-- before the hand-on is replaced by one that hands on the kept answer (I12).
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'waiting', 'answered', 'succeeded', 'failed', 'interrupted'));
DROP INDEX runs_status;
CREATE INDEX runs_status ON runs (status) WHERE status IN ('queued', 'running', 'waiting', 'answered');
CREATE INDEX runs_channel_created ON runs (channel, created_at DESC);

CREATE TABLE answers (
    run_id       uuid PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    answer       text NOT NULL,
    seal         text NOT NULL,
    key_id       text NOT NULL,
    kept_until   timestamptz NOT NULL,
    written_at   timestamptz NOT NULL DEFAULT now(),
    handed_on_at timestamptz
);
COMMENT ON TABLE answers IS
    'I12: a run''s final answer, sealed (HMAC over the run id and the text), kept until kept_until '
    '(TICKETIQ_ANSWER_TTL_S) and then purged by the leader. The hand-on reads this, never the model.';
CREATE INDEX answers_kept_until ON answers (kept_until);

-- A question the model asked a person through the built-in `request_input` tool. Filed by the
-- statement that makes the run wait, so an input can never come before the run waits for it.
CREATE TABLE inputs (
    id          uuid PRIMARY KEY,
    run_id      uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    step        integer NOT NULL,
    idx         integer NOT NULL,
    question    text NOT NULL,
    status      text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'given')),
    text        text,
    given_by    text,
    asked_at    timestamptz NOT NULL DEFAULT now(),
    given_at    timestamptz,
    UNIQUE (run_id, step, idx)
);
CREATE INDEX inputs_run_pending ON inputs (run_id) WHERE status = 'pending';
COMMENT ON TABLE inputs IS
    'A question the model asked a person (the built-in request_input tool) and the input given to it: '
    'the run waits, without a lease, until an input comes by POST /v1/runs/{id}/input or an A2A message.';

-- I5, I6, I12: take a run as before, but a run taken while it hands on its answer stays `answered`.
CREATE OR REPLACE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz)
LANGUAGE sql VOLATILE AS $$
    WITH prior AS (
        SELECT l.expires_at FROM leases l WHERE l.name = 'checkpoint:' || p_run_id::text
    ), lease AS (
        INSERT INTO leases (name, holder, expires_at)
        VALUES ('checkpoint:' || p_run_id::text, p_holder, now() + make_interval(secs => p_ttl))
        ON CONFLICT (name) DO UPDATE
           SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, acquired_at = now()
        RETURNING name
    ), taken AS (
        UPDATE checkpoints c
           SET attempt = c.attempt + 1, losses = c.losses + CASE WHEN p_loss THEN 1 ELSE 0 END
          FROM lease
         WHERE c.run_id = p_run_id
        RETURNING c.run_id, c.attempt, c.step, c.losses, c.state, c.seal, c.key_id, c.prev_seal,
                  c.sealed_attempt, c.sealed_losses, c.seal_format
    ), running AS (
        UPDATE runs r SET status = 'running', started_at = coalesce(r.started_at, now())
          FROM taken
         WHERE r.id = taken.run_id AND r.status NOT IN ('running', 'answered')
    )
    SELECT t.run_id, t.attempt, t.step, t.losses, t.state, t.seal, t.key_id, t.prev_seal, t.sealed_attempt,
           t.sealed_losses, t.seal_format, (SELECT expires_at FROM prior)
      FROM taken t
$$;

-- The sealed checkpoint as every statement but the read-only step's writes it, fenced by the attempt
-- (I1, I3, I17): the run id when the row still belongs to this attempt, else no row.
CREATE FUNCTION seal_checkpoint(p_run_id uuid, p_attempt integer, p_step integer, p_state text, p_seal text,
                                p_key_id text, p_prev_seal text, p_losses integer)
RETURNS SETOF uuid
LANGUAGE sql VOLATILE AS $$
    UPDATE checkpoints
       SET step = p_step, state = p_state, seal = p_seal, key_id = p_key_id, prev_seal = p_prev_seal,
           sealed_attempt = p_attempt, sealed_losses = p_losses, seal_format = 2, written_at = now()
     WHERE run_id = p_run_id AND attempt = p_attempt
    RETURNING run_id
$$;

-- The finished calls (reads, refusals) riding on a statement, landed by it; called only after the
-- statement's checkpoint matched its attempt.
CREATE FUNCTION land_finished(p_run_id uuid, p_attempt integer, p_finished jsonb)
RETURNS integer
LANGUAGE sql VOLATILE AS $$
    WITH landed AS (
        INSERT INTO calls (run_id, step, idx, attempt, provider_call_id, tool, class, step_key, args, gate,
                           status, outcome, settlement)
        SELECT p_run_id, f.step, f.idx, p_attempt, f.id, f.tool, f.class, f.step_key, f.args, f.gate,
               'done', f.outcome, f.how
          FROM jsonb_to_recordset(p_finished) AS f (step int, idx int, id text, tool text, class text,
                                                    step_key text, args jsonb, gate text, outcome jsonb, how text)
        ON CONFLICT (run_id, step, idx) DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::int FROM landed
$$;

-- Entry points follow a run (an A2A stream, a co-pilot caller) by its status changes.
CREATE FUNCTION runs_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ticketiq_runs', NEW.id::text);
    RETURN NULL;
END $$;
CREATE TRIGGER runs_status_changed AFTER UPDATE OF status ON runs
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) EXECUTE FUNCTION runs_notify();

COMMENT ON TABLE channels IS
    'Channel gate: entry channels (api, playground, a2a, copilot, cron, teams, webhook, ticket_event, '
    'delegation); a channel without a row is enabled.';
