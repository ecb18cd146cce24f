-- beside: previous
-- Background jobs (issue 10; I13): source syncs, fine-tuning, classifier training, red-team runs and
-- workflow runs. A job is a row claimed under a lease (`job:<id>` in `leases`) by one conditional
-- statement that raises its attempt, the fence of every statement the job makes about itself (I3).
-- A job whose process died is queued again (resumable kinds) or failed `interrupted` (the others).

CREATE TABLE jobs (
    id                  uuid PRIMARY KEY,
    kind                text NOT NULL,
    params              jsonb NOT NULL DEFAULT '{}'::jsonb,
    status              text NOT NULL DEFAULT 'queued'
                        CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled', 'interrupted')),
    -- The kind's, copied at creation: the sweep decides without importing kinds.
    resumable           boolean NOT NULL,
    attempt             integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    losses              integer NOT NULL DEFAULT 0 CHECK (losses >= 0),
    state               jsonb NOT NULL DEFAULT '{}'::jsonb,
    progress_done       bigint NOT NULL DEFAULT 0,
    progress_total      bigint,
    result              jsonb,
    error               text,
    -- The process identity that claimed the current (or last) attempt.
    holder              text,
    created_by          text NOT NULL,
    created_at          timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    finished_at         timestamptz,
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    restarted_from      uuid REFERENCES jobs (id),
    CONSTRAINT jobs_running_held CHECK (status <> 'running' OR holder IS NOT NULL),
    CONSTRAINT jobs_finished CHECK ((status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
                                    = (finished_at IS NOT NULL))
);
COMMENT ON TABLE jobs IS
    'Background jobs (I13). queued -> running (claimed with lease job:<id>, attempt raised) -> succeeded, '
    'failed or cancelled. A job whose process died: resumable kinds queued again from their saved state '
    '(losses + 1, failed past TICKETIQ_JOB_MAX_LOSSES); the others interrupted, restarted by a person.';
COMMENT ON COLUMN jobs.attempt IS
    'Raised by every claim: the fence of every statement the running job makes about itself (I3).';
COMMENT ON COLUMN jobs.state IS
    'What the job last saved (Job.save), fenced by its attempt; a resumed job goes on from it.';
COMMENT ON COLUMN jobs.losses IS
    'How often the process running it died or lost its lease (the sweep counts it).';
COMMENT ON COLUMN jobs.restarted_from IS
    'The interrupted, failed or cancelled job this one was restarted from (POST /v1/jobs/{id}/restart).';

-- The worker's claim reads the oldest queued job through this (FOR UPDATE SKIP LOCKED).
CREATE INDEX jobs_queued ON jobs (created_at) WHERE status = 'queued';
-- The sweep and a clean stop read only running jobs.
CREATE INDEX jobs_running ON jobs (holder) WHERE status = 'running';
-- GET /v1/jobs, newest first.
CREATE INDEX jobs_created ON jobs (created_at DESC, id);
-- A job is restarted once: a second restart (a double click) is told which job the first made.
CREATE UNIQUE INDEX jobs_restarted_once ON jobs (restarted_from) WHERE restarted_from IS NOT NULL;
