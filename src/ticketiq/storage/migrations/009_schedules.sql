-- beside: previous
-- Cron schedules and their fires (issue 8). The leader fires due schedules; each fire is one row per
-- (schedule, fire time), so a leader failover or two leaders never fire one time twice.

CREATE TABLE schedules (
    id           uuid PRIMARY KEY,
    -- Set for a schedule the agents file declares: it is upserted by this name at each start. NULL for
    -- one made through the API. Unique among deleted rows too: a declared schedule a person deleted
    -- stays deleted (as a revoked grant stays revoked); rename it in the file to declare it again.
    name         text UNIQUE,
    agent        text NOT NULL,
    cron         text NOT NULL,
    timezone     text NOT NULL,
    input        text NOT NULL,
    next_fire_at timestamptz NOT NULL,
    created_by   text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    deleted_at   timestamptz,
    deleted_by   text
);
COMMENT ON TABLE schedules IS
    'A cron trigger: the agent run with `input` at the times `cron` names in the IANA zone `timezone`. '
    '`next_fire_at` is the first fire time not yet considered (UTC); the leader fires it once it has come '
    'and moves it on. Deleted schedules are kept (deleted_at) with their fires.';
-- The leader's one query per check reads only due, live schedules.
CREATE INDEX schedules_due ON schedules (next_fire_at) WHERE deleted_at IS NULL;

CREATE TABLE schedule_fires (
    schedule_id     uuid NOT NULL REFERENCES schedules (id),
    fire_at         timestamptz NOT NULL,
    -- The idempotency key of the fire's run (cron:<schedule>:<fire time>): two leaders make one run.
    run_key         text NOT NULL UNIQUE,
    run_id          uuid REFERENCES runs (id),
    skipped         boolean NOT NULL DEFAULT false,
    -- Why the fire made no run: skipped as missed (TICKETIQ_CRON_MISSED=skip), or its agent is gone.
    reason          text,
    fired_by        text NOT NULL,
    fired_at        timestamptz NOT NULL DEFAULT now(),
    -- The cron hand-on (I12): the answer, recorded once, fenced by the run's attempt.
    outcome         text,
    outcome_at      timestamptz,
    outcome_attempt integer,
    PRIMARY KEY (schedule_id, fire_at)
);
COMMENT ON TABLE schedule_fires IS
    'One fire of a schedule, unique per (schedule, fire time) and inserted ON CONFLICT DO NOTHING. Its run '
    'is made with the idempotency key run_key and started; the run''s hand-on records the outcome once. '
    'Whether the fire succeeded or failed is its run''s status, read through run_id, never copied here.';
-- Fires whose leader died between recording them and making their run: the next check makes it.
CREATE INDEX schedule_fires_unmade ON schedule_fires (fired_at) WHERE run_id IS NULL AND reason IS NULL;
CREATE INDEX schedule_fires_run ON schedule_fires (run_id) WHERE run_id IS NOT NULL;
