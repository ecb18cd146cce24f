-- beside: previous
-- Who may do what (DESIGN.md): bearer tokens for the HTTP API, and the token that started each run.

-- Only a token's SHA-256 is kept: the token itself is shown once, when it is made, and stored nowhere.
-- The hash check refuses anything but 64 hex digits, so a raw token (`tiq_...`) can never land here by
-- mistake. A row is never deleted and a name never reused: the name an audit row or a decision names
-- as its actor keeps meaning the same token after it was revoked.
CREATE TABLE api_tokens (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$'),
    role       text NOT NULL CHECK (role IN ('caller', 'operator', 'admin')),
    agents     text[] CHECK (agents IS NULL OR cardinality(agents) > 0),
    token_hash text NOT NULL UNIQUE CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
COMMENT ON TABLE api_tokens IS
    'Bearer tokens of the HTTP API: a name (the actor of what the token does), a role (caller, operator, '
    'admin), the agents it may start (NULL: every agent) and the SHA-256 hex of the token, looked up by '
    'that hash. A revoked token keeps its row (revoked_at set) and its name.';

ALTER TABLE runs ADD COLUMN created_by text;
COMMENT ON COLUMN runs.created_by IS
    'The name of the API token that started the run (a delegated child: its parent''s); a caller reads '
    'only its own runs. NULL for runs started before tokens existed.';
