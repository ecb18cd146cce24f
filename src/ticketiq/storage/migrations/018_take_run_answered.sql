-- beside: previous
-- I12: a run taken over while it hands on its kept answer stays `answered`.
--
-- Migration 005 made take_run() leave an `answered` run `answered`; migration 012 rewrote the function
-- (to hand leases to other processes) with `r.status <> 'running'`, which undid that: a takeover turned
-- `answered` into `running`, so `runs.purge_answers` (which spares only answers of `answered` runs)
-- dropped the answer once its time passed, and the next attempt failed the run with "the kept answer is
-- gone" instead of handing it on. The function as 012 defined it, with 005's condition back.

CREATE OR REPLACE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean, p_handed text DEFAULT NULL)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH prior AS (
        -- The snapshot's row: the expiry the last holder renewed it to. The caller holds its lock.
        SELECT l.expires_at FROM leases l WHERE l.name = 'checkpoint:' || p_run_id::text
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
