-- beside: none: approvals.binding and the checkpoints' sealed_attempt and sealed_losses become NOT NULL: the release before inserts rows without them
-- The run store's shared pieces: one function that takes a run (its lease and a new attempt), the
-- in-doubt horizon of a write (I14), approvals bound to the call they were filed for (I15), the
-- checkpoint chain and the cluster's seal key probe (I17).

-- I14: the latest moment, on the database clock, the marking process could still have had the write
-- in flight: its mark plus the write's whole budget, and no later than the lease's expiry at the mark
-- plus one request timeout (the process sends no try of that write after the lease deadline it had
-- at the mark). A resume reads the write back only after this moment.
ALTER TABLE calls ADD COLUMN in_flight_until timestamptz;
COMMENT ON COLUMN calls.in_flight_until IS
    'I14: until when the process that marked this call in doubt could still have had it in flight.';

-- I15: an approval decides exactly the call it was filed for: its run, step key, tool and arguments,
-- hashed into `binding`. A call routed again with other arguments files a new request. Requests filed
-- before this migration keep a binding of their own and so are never taken for another call.
ALTER TABLE approvals DROP CONSTRAINT approvals_run_id_step_idx_key;
ALTER TABLE approvals ADD COLUMN binding text;
UPDATE approvals SET binding = 'legacy:' || id::text;
ALTER TABLE approvals ALTER COLUMN binding SET NOT NULL;
ALTER TABLE approvals ADD CONSTRAINT approvals_binding UNIQUE (run_id, binding);
CREATE INDEX approvals_run_step ON approvals (run_id, step);
CREATE INDEX approvals_run_pending ON approvals (run_id) WHERE status = 'pending';
COMMENT ON COLUMN approvals.binding IS
    'I15: SHA-256 over the run, step, call index, step key, tool and canonical arguments of the call.';

-- I17: each seal covers the attempt and loss count it was written under and the seal it replaced, so
-- an edited or rolled-back checkpoint, or a loss count reset below what was sealed, fails on resume.
-- Checkpoints sealed before this migration keep format 1 (run id, step, state) until their next write.
ALTER TABLE checkpoints
    ADD COLUMN prev_seal text,
    ADD COLUMN sealed_attempt integer,
    ADD COLUMN sealed_losses integer,
    ADD COLUMN seal_format smallint NOT NULL DEFAULT 2;
UPDATE checkpoints SET seal_format = 1, sealed_attempt = attempt, sealed_losses = losses;
ALTER TABLE checkpoints ALTER COLUMN sealed_attempt SET NOT NULL, ALTER COLUMN sealed_losses SET NOT NULL;
COMMENT ON COLUMN checkpoints.sealed_attempt IS
    'The attempt that wrote this checkpoint, covered by the seal; `attempt` is raised above it by a take.';

-- I5, I6: take a run. The callers (acquire a queued or waiting run; claim a lapsed lease, a dead
-- process's lease, a delegation's child) each decide under their own row lock WHETHER a run may be
-- taken; this one function takes it: the lease, the attempt raised (and a loss counted when it was
-- lost), the run marked running. It returns the checkpoint to go on from and the lease's expiry before
-- it was taken, which bounds how long the last holder could still have had a write in flight (I14).
CREATE FUNCTION take_run(p_run_id uuid, p_holder text, p_ttl float8, p_loss boolean)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz)
LANGUAGE sql VOLATILE AS $$
    WITH prior AS (
        -- The snapshot's row: the expiry the last holder renewed it to. The caller holds its lock.
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
         WHERE r.id = taken.run_id AND r.status <> 'running'
    )
    SELECT t.run_id, t.attempt, t.step, t.losses, t.state, t.seal, t.key_id, t.prev_seal, t.sealed_attempt,
           t.sealed_losses, t.seal_format, (SELECT expires_at FROM prior)
      FROM taken t
$$;

CREATE TABLE seal_probe (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    key_id   text NOT NULL,
    seal     text NOT NULL,
    made_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE seal_probe IS
    'I17: one fixed text sealed by the key that signs in this cluster. A process whose TICKETIQ_SEAL_KEYS '
    'cannot verify it refuses to start, so two hosts never sign with keys the other cannot verify.';
