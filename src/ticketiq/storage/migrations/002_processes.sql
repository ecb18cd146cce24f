-- beside: previous
-- Processes and their liveness marks, for taking over a dead process's runs without waiting out the
-- lease TTL (DESIGN: "detect death in under 2 s").

CREATE SEQUENCE process_lock_keys;

CREATE TABLE processes (
    id         text PRIMARY KEY,
    lock_key   integer NOT NULL UNIQUE,
    pid        integer NOT NULL,
    host       text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz
);
COMMENT ON TABLE processes IS
    'App process starts. Each holds the session advisory lock (7117, lock_key) on a dedicated connection '
    'for as long as it lives: a SIGKILLed process''s connection closes and its lock is free at once. '
    'ended_at is set when it stopped cleanly or was found dead; a restarted process is a new row.';

-- Is the process holding its liveness lock? Read from pg_locks: no lock is taken to find out.
CREATE FUNCTION process_alive(process_id text) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1
          FROM processes p
          JOIN pg_locks l ON l.locktype = 'advisory' AND l.classid = 7117::oid
                         AND l.objid = p.lock_key::oid AND l.objsubid = 2 AND l.granted
                         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         WHERE p.id = process_id AND p.ended_at IS NULL
    )
$$;

CREATE INDEX processes_live ON processes (id) WHERE ended_at IS NULL;
