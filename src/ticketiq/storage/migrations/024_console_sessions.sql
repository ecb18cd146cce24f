-- beside: previous
-- The console's sign-in sessions (issue 16). A person pastes a token once; the browser then holds only
-- a random session id in an HttpOnly cookie. Kept here: the SHA-256 of that id (never the id, never the
-- token), the name of the token it signed in with (its identity: the session acts as that token, and
-- ends when the token is revoked), the CSRF secret every state-changing form carries, and when it
-- expires. Expiry is judged by the database clock.
CREATE TABLE console_sessions (
    id_hash     text PRIMARY KEY CHECK (id_hash ~ '^[0-9a-f]{64}$'),
    token_name  text NOT NULL REFERENCES api_tokens (name),
    csrf_secret text NOT NULL CHECK (length(csrf_secret) >= 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
COMMENT ON TABLE console_sessions IS
    'Console sign-in sessions: the SHA-256 hex of the cookie''s session id, the token it acts as (a revoked '
    'token ends it), the CSRF secret of its forms, and its expiry (database clock). Sign-out deletes the row.';
-- The leader's purge of expired sessions reads them by expiry.
CREATE INDEX console_sessions_expiry ON console_sessions (expires_at);
