-- beside: previous
-- The Teams inbox: every Bot Framework activity POST /v1/teams/messages took, kept before it was
-- acknowledged. A turn's run is the run whose idempotency key is the row's `run_key`: the row never
-- keeps a copy of the run's status, it is read from the run (and the reply from the run's hand-on).

CREATE TABLE teams_inbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    activity_id     text NOT NULL CHECK (length(activity_id) BETWEEN 1 AND 256),
    conversation_id text NOT NULL CHECK (length(conversation_id) BETWEEN 1 AND 1024),
    content_hash    text NOT NULL,
    run_key         text NOT NULL UNIQUE,
    service_url     text NOT NULL,
    team_id         text,
    from_id         text NOT NULL,
    from_name       text,
    actor           text NOT NULL,
    text            text NOT NULL,
    app_url         text NOT NULL,
    activity        jsonb NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    run_id          uuid REFERENCES runs (id),
    reason          text,
    UNIQUE (conversation_id, activity_id)
);
COMMENT ON TABLE teams_inbox IS
    'Teams inbox: each Bot Framework activity taken (authenticated by its JWT, deduplicated on the '
    'conversation and activity id, and on `content_hash` within TICKETIQ_TEAMS_DEDUPE_S), stored before it '
    'is acknowledged. Its turn is the run whose idempotency_key is `run_key`, so a row is handed back with '
    'its run''s lease. `run_id` is written once the run is made (the leader makes the run of a row left '
    'without one); `reason` only when no run can be made. `service_url`, `conversation_id`, `activity_id` '
    'and `team_id` are where the reply goes and is read back; `app_url` the base URL the activity came in '
    'by (the run link''s base without TICKETIQ_PUBLIC_URL).';
-- The content dedupe: the latest row with a hash, within the window.
CREATE INDEX teams_inbox_content ON teams_inbox (content_hash, received_at DESC);
-- The leader's look for rows whose process died before it made their run.
CREATE INDEX teams_inbox_unstarted ON teams_inbox (received_at) WHERE run_id IS NULL AND reason IS NULL;
