-- beside: none: take_run(uuid, text, float8, boolean) is dropped for its new signature, which the release before still calls
-- Claimed and started runs spread over the live processes. The leader's claims (a dead process's
-- leases, lapsed leases) and its starts (orphaned queued runs, runs whose wait was decided, cron fires,
-- unstarted Teams turns) give each run's lease straight to the least loaded live process, in the one
-- statement that takes it (I5); that process learns by NOTIFY (and a periodic look) and drives it.

-- A lease given to its holder by another process's take, not yet taken up by it: why it was taken
-- (dead, lapsed: a loss; acquired: a start) and the attempt it was taken under. The holder takes it up
-- by one statement fenced by that attempt (I3), which also renews it; a holder that dies first never
-- renews it, and it is claimed again like any other lease (nothing lost, never two drivers).
ALTER TABLE leases
    ADD COLUMN handed_why text CHECK (handed_why IN ('dead', 'lapsed', 'acquired')),
    ADD COLUMN handed_attempt integer,
    ADD CONSTRAINT leases_handed CHECK ((handed_why IS NULL) = (handed_attempt IS NULL));
COMMENT ON COLUMN leases.handed_why IS
    'Set while another process''s take gave this lease to its holder and the holder has not taken it up '
    '(dead, lapsed: claimed, a loss; acquired: started); the holder takes it up under handed_attempt.';
CREATE INDEX leases_handed ON leases (holder) WHERE handed_why IS NOT NULL;

-- A process stopping cleanly is given no more runs.
ALTER TABLE processes ADD COLUMN draining_at timestamptz;
COMMENT ON COLUMN processes.draining_at IS
    'When the process began a clean stop: from then on no run is handed to it.';

-- I5, I6: take a run, as before (migration 003), for `p_holder`; with `p_handed` (why it is taken) the
-- lease is given to another process: marked handed under the new attempt, and that process told on
-- `ticketiq_handed` (one notification per process and transaction, however many runs it is given). A
-- take by the holder itself clears the mark, so a lease is taken up at most once per attempt.
DROP FUNCTION take_run(uuid, text, float8, boolean);
CREATE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean, p_handed text DEFAULT NULL)
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
         WHERE r.id = taken.run_id AND r.status <> 'running'
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

-- Whom `p_n` runs taken by `p_claimer` go to, one row per run (`slot` 1..p_n): the live processes (mark
-- held, not ended, not stopping, no lease of theirs lapsed: a stalled process is given nothing) and the
-- claimer itself, always. A process's load is the checkpoint leases it holds: the runs it drives and
-- those given to it. The runs fill the least loaded up first; among equals another process before the
-- claimer (the leader, which has the sweeps and cron checks to run as well), the newest first. So a
-- fresh process gets the next run and a dead process's runs are spread over the survivors.
CREATE FUNCTION run_targets(p_claimer text, p_n integer)
RETURNS TABLE (slot bigint, holder text)
LANGUAGE sql STABLE AS $$
    WITH live AS (
        SELECT p_claimer AS id
         UNION
        SELECT p.id FROM processes p
         WHERE p_n > 0 AND p.ended_at IS NULL AND p.draining_at IS NULL AND process_alive(p.id)
           AND NOT EXISTS (SELECT 1 FROM leases l
                            WHERE l.holder = p.id AND l.expires_at < now() AND l.name LIKE 'checkpoint:%')
    ), load AS (
        SELECT live.id, (SELECT count(*) FROM leases l WHERE l.holder = live.id AND l.name LIKE 'checkpoint:%') AS held,
               (SELECT p.started_at FROM processes p WHERE p.id = live.id) AS started_at
          FROM live
    ), slots AS (
        SELECT load.id, load.started_at, load.held + k AS level FROM load, generate_series(0, p_n - 1) AS k
    )
    SELECT row_number() OVER (ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id), id
      FROM slots
     ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id
     LIMIT greatest(p_n, 0)
$$;
