-- beside: previous
-- A2A tasks (issue 7): one task per run started through A2A, its id the run's id.
--
-- A task's state is never stored: it is derived from its run whenever it is read (a2a_task_state), so
-- the task cannot say anything its run does not. The row keeps only what the run does not know: the
-- conversation's context id, the messages exchanged and the client's metadata.

CREATE TABLE a2a_tasks (
    run_id     uuid PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    context_id text NOT NULL,
    history    jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(history) = 'array'),
    metadata   jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE a2a_tasks IS
    'The A2A task of a run started through A2A (task id = run id). Holds the context id, the messages '
    'exchanged (protocol JSON, merged by messageId, never dropped) and the task''s metadata; its state, '
    'answer and error are the run''s, read through a2a_task_state(). `created_by` is the token that sent '
    'the first message: a caller lists and reads only its own tasks.';
-- ListTasks pages newest first, a caller's own or (operators) everyone's.
CREATE INDEX a2a_tasks_created_by ON a2a_tasks (created_by, created_at DESC, run_id DESC);
CREATE INDEX a2a_tasks_created ON a2a_tasks (created_at DESC, run_id DESC);

-- The one mapping from a run to its task's state, named as the protocol names it (TaskState). A run
-- waiting with nothing left pending (its input given or its approvals decided, not yet taken again)
-- is working: the client has nothing to answer. A Stop is a cancel.
CREATE FUNCTION a2a_task_state(p_run_id uuid, p_status text, p_error text) RETURNS text
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
        WHEN p_status = 'failed' AND starts_with(coalesce(p_error, ''), 'stopped by') THEN 'TASK_STATE_CANCELED'
        WHEN p_status IN ('failed', 'interrupted') THEN 'TASK_STATE_FAILED'
        ELSE 'TASK_STATE_UNSPECIFIED'
    END
$$;

-- What a run says of its task, read by every statement about tasks: the derived state, the answer or
-- error, and when it last changed (its end, else its latest step or start).
CREATE VIEW a2a_run_states AS
SELECT r.id AS run_id, r.created_by, r.answer, r.error,
       a2a_task_state(r.id, r.status, r.error) AS state,
       coalesce(r.finished_at, greatest(r.created_at, r.started_at, c.written_at)) AS changed_at
  FROM runs r LEFT JOIN checkpoints c ON c.run_id = r.id;
COMMENT ON VIEW a2a_run_states IS 'A run as its A2A task shows it: state (a2a_task_state), answer, error, changed_at.';

CREATE VIEW a2a_task_rows AS
SELECT t.run_id, t.context_id, t.history, t.metadata, t.created_by, t.created_at,
       s.answer, s.error, s.state, s.changed_at
  FROM a2a_tasks t JOIN a2a_run_states s ON s.run_id = t.run_id;
COMMENT ON VIEW a2a_task_rows IS 'An A2A task as GetTask and ListTasks answer it: its row and its run''s state.';
