-- beside: previous
-- The run's timeline (issue 16): when each call was marked, sent and answered, and each attempt of the
-- run: the process that held it, when it began and ended, how it ended, and after a loss when the loss
-- was found and when the new attempt first wrote. The times ride in the statements a step already
-- writes (a read-only step stays one statement); a step's own times ride in its `model_step` note.
--
-- Two clocks: the database's (now(): `marked_at`, every time of `run_attempts`) and the wall clock of
-- the process that made the call (`sent_at`, `outcome_at`: taken where the request went out and its
-- answer came back, and written by the statement after). Compare times of one clock with each other.

ALTER TABLE calls
    ADD COLUMN marked_at timestamptz,
    ADD COLUMN sent_at timestamptz,
    ADD COLUMN outcome_at timestamptz;
COMMENT ON COLUMN calls.marked_at IS
    'Database clock: when the in-doubt mark (I2) committed; a write sent again is marked again.';
COMMENT ON COLUMN calls.sent_at IS
    'Wall clock of the process that sent it: when the request went out (NULL: never known to be sent).';
COMMENT ON COLUMN calls.outcome_at IS
    'Wall clock of the process that recorded it: when the answer came back, or the call was refused or settled.';

CREATE TABLE run_attempts (
    run_id           uuid NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    attempt          integer NOT NULL,
    process          text NOT NULL,
    started_at       timestamptz NOT NULL DEFAULT now(),
    first_at         timestamptz,
    ended_at         timestamptz,
    ended            text CHECK (ended IN ('finished', 'lost', 'handed_back', 'stalled', 'waiting')),
    lost_detected_at timestamptz,
    PRIMARY KEY (run_id, attempt),
    CONSTRAINT run_attempts_ended CHECK ((ended IS NULL) = (ended_at IS NULL))
);
COMMENT ON TABLE run_attempts IS
    'One row per attempt of a run (database clock throughout): opened by the take that raised the attempt '
    '(take_run), for the process it was given to; closed by the statement that ended, suspended or handed '
    'back the run under that attempt, or by the next take (lost: its process was gone; stalled: its process '
    'lived but let the lease lapse; handed_back). `lost_detected_at`: the take found the previous attempt '
    'lost; `first_at`: the attempt''s first checkpoint, audit or end, so first_at - lost_detected_at is how '
    'long the takeover took.';

-- I5, I6, I12: take_run as migration 018 defined it, which now also opens the new attempt's row and
-- closes the attempt it ends.
CREATE OR REPLACE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean, p_handed text DEFAULT NULL)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH prior AS (
        -- The snapshot's row: the expiry the last holder renewed it to, and that holder. The caller holds
        -- its lock.
        SELECT l.expires_at, l.holder FROM leases l WHERE l.name = 'checkpoint:' || p_run_id::text
    ), lease AS (
        INSERT INTO leases (name, holder, expires_at)
        VALUES ('checkpoint:' || p_run_id::text, p_holder, now() + make_interval(secs => p_ttl))
        ON CONFLICT (name) DO UPDATE
           SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, acquired_at = now(),
               handed_why = NULL, handed_attempt = NULL
        RETURNING leases.name
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
         -- I12: a run taken while it hands on its kept answer stays `answered`: the purge spares
          -- that answer until it is handed on, and the new attempt hands it on instead of asking again.
         WHERE r.id = taken.run_id AND r.status NOT IN ('running', 'answered')
    ), closed AS (
        -- The attempt this take ends, when nothing closed it: a loss found now (the lease's last holder
        -- is gone, or lives but let the lease lapse: stalled), or a take that counts no loss (handed back).
        UPDATE run_attempts a
           SET ended_at = now(),
               ended = CASE WHEN NOT p_loss THEN 'handed_back'
                            WHEN process_alive((SELECT prior.holder FROM prior)) THEN 'stalled' ELSE 'lost' END
          FROM taken
         WHERE a.run_id = taken.run_id AND a.attempt = taken.attempt - 1 AND a.ended IS NULL
    ), opened AS (
        INSERT INTO run_attempts (run_id, attempt, process, lost_detected_at)
        SELECT taken.run_id, taken.attempt, p_holder, CASE WHEN p_loss THEN now() END FROM taken
        ON CONFLICT ON CONSTRAINT run_attempts_pkey DO NOTHING
    )
    SELECT t.run_id, t.attempt, t.step, t.losses, t.state, t.seal, t.key_id, t.prev_seal, t.sealed_attempt,
           t.sealed_losses, t.seal_format, (SELECT prior.expires_at FROM prior)
      FROM taken t;
    IF FOUND AND p_handed IS NOT NULL THEN
        -- A statement of its own: it sees the attempt the take just raised.
        UPDATE leases l SET handed_why = p_handed, handed_attempt = c.attempt
          FROM checkpoints c
         WHERE l.name = 'checkpoint:' || p_run_id::text AND c.run_id = p_run_id;
        PERFORM pg_notify('ticketiq_handed', p_holder);
    END IF;
END
$$;

-- The finished calls (reads, refusals) riding on a statement, landed by it, as migration 005 defined
-- it, with the times the process took for them (epoch seconds of its wall clock, in the JSON).
CREATE OR REPLACE FUNCTION land_finished(p_run_id uuid, p_attempt integer, p_finished jsonb)
RETURNS integer
LANGUAGE sql VOLATILE AS $$
    WITH landed AS (
        INSERT INTO calls (run_id, step, idx, attempt, provider_call_id, tool, class, step_key, args, gate,
                           status, outcome, settlement, sent_at, outcome_at)
        SELECT p_run_id, f.step, f.idx, p_attempt, f.id, f.tool, f.class, f.step_key, f.args, f.gate,
               'done', f.outcome, f.how, to_timestamp(f.sent_at), to_timestamp(f.outcome_at)
          FROM jsonb_to_recordset(p_finished) AS f (step int, idx int, id text, tool text, class text,
                                                    step_key text, args jsonb, gate text, outcome jsonb, how text,
                                                    sent_at float8, outcome_at float8)
        ON CONFLICT (run_id, step, idx) DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::int FROM landed
$$;
