-- beside: previous
-- Issue 31: versioned checkpoints. Each checkpoint records the format of its state beside its seal's, and
-- each process the newest formats it knows (engine/resume.py). A checkpoint no process knows is left
-- for one that does: no take gives it to a process that cannot read it, whichever release's query asks
-- (the guard is in take_run, which the previous release calls too), and the sweeps pass it by while no
-- live process knows it, so it is never failed, rewritten or counted as a loss.
-- The previous release runs beside this: the columns it does not write keep their defaults (its
-- checkpoints are state format 1; its process rows NULL, read as state 1, seal 2: what it knew); the
-- functions it calls keep their names and arguments (seal_checkpoint's two new ones have defaults), and
-- the column take_run and give_runs now also return is one more its queries read by name and pass by.

ALTER TABLE checkpoints ADD COLUMN state_format smallint NOT NULL DEFAULT 1;
COMMENT ON COLUMN checkpoints.state_format IS
    'The format of `state` (engine/state.py STATE_FORMAT of the release that wrote it); a process resumes '
    'only a checkpoint whose state and seal formats it knows (knows_checkpoint).';
ALTER TABLE processes ADD COLUMN state_format smallint, ADD COLUMN seal_format smallint;
COMMENT ON COLUMN processes.state_format IS
    'The newest checkpoint state format the process knows; NULL: a release before migration 031 (1).';
COMMENT ON COLUMN processes.seal_format IS
    'The newest checkpoint seal format the process knows; NULL: a release before migration 031 (2).';

-- Whether a process can resume the run's checkpoint: both its formats at most the newest it knows. A
-- process with no row (or no formats: an older release) knows what the release before 031 knew.
CREATE FUNCTION knows_checkpoint(p_process text, p_run_id uuid)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT NOT EXISTS (
        SELECT 1 FROM checkpoints c
          LEFT JOIN processes p ON p.id = p_process
         WHERE c.run_id = p_run_id
           AND (c.state_format > coalesce(p.state_format, 1) OR c.seal_format > coalesce(p.seal_format, 2))
    )
$$;

-- The least loaded live process (not draining) that can resume the run's checkpoint, the claimer last
-- among equals as run_targets ranks it; NULL when none can: the run is left for a process that knows
-- its formats.
CREATE FUNCTION checkpoint_knower(p_run_id uuid, p_claimer text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT p.id FROM processes p
     WHERE p.ended_at IS NULL AND p.draining_at IS NULL AND knows_checkpoint(p.id, p_run_id)
       AND process_alive(p.id)
     ORDER BY (SELECT count(*) FROM leases l WHERE l.holder = p.id AND l.name LIKE 'checkpoint:%'),
              p.id = p_claimer, p.started_at DESC NULLS LAST, p.id
     LIMIT 1
$$;

-- The checkpoint as every statement but the read-only step's writes it (migration 005), now with the
-- formats its writer used. Dropped for its new signature: the previous release's eight-argument calls
-- resolve to this one and write what it wrote (state 1, seal 2).
DROP FUNCTION seal_checkpoint(uuid, integer, integer, text, text, text, text, integer);
CREATE FUNCTION seal_checkpoint(p_run_id uuid, p_attempt integer, p_step integer, p_state text, p_seal text,
                                p_key_id text, p_prev_seal text, p_losses integer,
                                p_state_format smallint DEFAULT 1, p_seal_format smallint DEFAULT 2)
RETURNS SETOF uuid
LANGUAGE sql VOLATILE AS $$
    UPDATE checkpoints
       SET step = p_step, state = p_state, seal = p_seal, key_id = p_key_id, prev_seal = p_prev_seal,
           sealed_attempt = p_attempt, sealed_losses = p_losses, seal_format = p_seal_format,
           state_format = p_state_format, written_at = now()
     WHERE run_id = p_run_id AND attempt = p_attempt
    RETURNING run_id
$$;

-- take_run as migration 023 defined it, which now takes the run only for a process that knows its
-- checkpoint (else it takes nothing and changes nothing: no lease, no attempt, no loss), and returns the
-- state format too. give_runs (migration 017) returns what take_run does, so it is made again with it;
-- it now gives a run whose checkpoint the least loaded process cannot read to the least loaded one
-- that can, and passes it by when none can.
DROP FUNCTION give_runs(text[], text, float8, text);
DROP FUNCTION take_run(uuid, text, float8, boolean, text);
CREATE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean, p_handed text DEFAULT NULL)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz, state_format smallint)
LANGUAGE plpgsql VOLATILE AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH prior AS (
        -- The snapshot's row: the expiry the last holder renewed it to, and that holder. The caller holds
        -- its lock.
        SELECT l.expires_at, l.holder FROM leases l WHERE l.name = 'checkpoint:' || p_run_id::text
    ), lease AS (
        -- Everything else follows the lease: a process that cannot read the checkpoint is given nothing.
        INSERT INTO leases (name, holder, expires_at)
        SELECT 'checkpoint:' || p_run_id::text, p_holder, now() + make_interval(secs => p_ttl)
         WHERE knows_checkpoint(p_holder, p_run_id)
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
                  c.sealed_attempt, c.sealed_losses, c.seal_format, c.state_format
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
           t.sealed_losses, t.seal_format, (SELECT prior.expires_at FROM prior), t.state_format
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

CREATE FUNCTION give_runs(p_names text[], p_claimer text, p_ttl float8, p_why text)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz, state_format smallint, why text, holder text)
LANGUAGE sql VOLATILE AS $$
    WITH picked AS (
        SELECT name, substr(name, 12)::uuid AS id, row_number() OVER (ORDER BY name) AS slot
          FROM unnest(p_names) AS name
    ), targets AS (
        -- Only when there is something to give: the look for targets costs more than the claim of nothing.
        SELECT t.slot, t.holder
          FROM (SELECT count(*)::int AS n FROM picked) c, LATERAL run_targets(p_claimer, c.n) t
         WHERE c.n > 0
    ), given AS (
        -- The slot's process when it can read the checkpoint (every run, while one release serves); else
        -- the least loaded that can, or none.
        SELECT picked.id,
               CASE WHEN knows_checkpoint(targets.holder, picked.id) THEN targets.holder
                    ELSE checkpoint_knower(picked.id, p_claimer) END AS holder
          FROM picked JOIN targets USING (slot)
    )
    SELECT t.*, p_why, given.holder
      FROM given,
           LATERAL take_run(given.id, given.holder, p_ttl, true,
                            CASE WHEN given.holder <> p_claimer THEN p_why END) t
     WHERE given.holder IS NOT NULL
$$;
