-- beside: previous
-- Workflow runs (issue 10): a workflow run is a job of kind `workflow` (013); its checkpoint is the job's
-- state. Each step execution is one row here, written by the same fenced statement that saves the state,
-- so the rows and the state never disagree.

CREATE TABLE workflow_steps (
    job_id          uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- The how-manyth step execution of the run (1 for the first): the steps executed before it, plus one.
    -- A step executed again after a crash writes the same row; a loop back to a step writes a new one.
    seq             integer NOT NULL CHECK (seq >= 1),
    step_id         text NOT NULL,
    kind            text NOT NULL CHECK (kind IN ('tool', 'agent')),
    tool            text,
    agent           text,
    -- The step key (I11): from the run, the step id and the steps executed before it.
    key             text NOT NULL,
    status          text NOT NULL CHECK (status IN ('running', 'in_doubt', 'done', 'failed')),
    args            jsonb,
    output          jsonb,
    error           text,
    -- An agent step's run (made with the step key as its idempotency key: a retry finds it again).
    run_id          uuid,
    -- A write marked in doubt (I2) can be in flight until this moment, on the database clock (I14): the
    -- mark plus the write budget. A resume reads it back only after it.
    in_flight_until timestamptz,
    -- How a step left in doubt by a lost attempt was settled on resume (resent_same_key, found,
    -- sent_once, unknown_not_sent); NULL for a step no resume settled.
    settled         text,
    attempt         integer NOT NULL,  -- the job attempt that last wrote the row
    started_at      timestamptz NOT NULL DEFAULT now(),
    ended_at        timestamptz,
    PRIMARY KEY (job_id, seq)
);
COMMENT ON TABLE workflow_steps IS
    'One row per step execution of a workflow run (a job of kind workflow), with the key it sent (I11), '
    'its output, and for a write how it was settled after a crash. Written only by statements fenced by '
    'the job''s attempt, together with the job''s state.';
