-- beside: previous
-- Idempotency-Key for every API POST that creates something: one row per (route, token, key).

CREATE TABLE idempotency_keys (
    scope        text NOT NULL,
    principal    text NOT NULL,
    key          text NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash text NOT NULL,
    state        text NOT NULL CHECK (state IN ('working', 'done')),
    status_code  integer,
    response     text,
    holder       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    answered_at  timestamptz,
    PRIMARY KEY (scope, principal, key),
    CHECK ((state = 'working') = (expires_at IS NOT NULL)),
    CHECK ((state = 'done') = (status_code IS NOT NULL AND response IS NOT NULL AND answered_at IS NOT NULL))
);
COMMENT ON TABLE idempotency_keys IS
    'Idempotency-Key of the API''s POSTs that create something. `scope` is the route (`POST /v1/runs`), '
    '`principal` the token''s name: keys of different tokens never meet. A request claims its key '
    '(`working`, held by process `holder` until `expires_at`, its claim, by the database clock), then '
    'keeps its answer (`done`: `status_code` and `response`, the JSON text exactly as sent, replayed byte '
    'for byte). `created_at` is when the current claim was taken (with `holder`, the claim''s identity). '
    'The leader purges rows answered, or claimed and never answered, longer ago than '
    'TICKETIQ_IDEMPOTENCY_TTL_S (at least a day).';
CREATE INDEX idempotency_keys_age ON idempotency_keys ((coalesce(answered_at, created_at)));
