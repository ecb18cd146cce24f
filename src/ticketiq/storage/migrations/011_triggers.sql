-- beside: previous
-- Webhook triggers and Jira ticket events (issue 8): entry points from outside, authenticated by an
-- HMAC signature over the raw body, each delivery deduped by its sender's id and started as one run.

CREATE TABLE triggers (
    name       text PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$'),
    agent      text NOT NULL CHECK (length(agent) BETWEEN 1 AND 200),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE triggers IS
    'Webhook triggers: POST /v1/hooks/<name>, signed with one of the trigger''s active secrets, starts a '
    'run of `agent` on the webhook channel, as the principal `trigger:<name>`. Declared by an admin '
    '(`created_by`, the token''s name).';

-- A secret is needed in clear to compute an HMAC, so it is kept encrypted (AES-256-GCM, key derived
-- from the seal key `key_id`, the trigger's name as associated data), never hashed and never shown.
CREATE TABLE trigger_secrets (
    trigger    text NOT NULL REFERENCES triggers (name),
    n          integer NOT NULL CHECK (n >= 1),
    key_id     text NOT NULL,
    nonce      bytea NOT NULL CHECK (length(nonce) = 12),
    ciphertext bytea NOT NULL CHECK (length(ciphertext) > 16),
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    retired_at timestamptz,
    retired_by text,
    PRIMARY KEY (trigger, n),
    CHECK ((retired_at IS NULL) = (retired_by IS NULL))
);
COMMENT ON TABLE trigger_secrets IS
    'The secrets a trigger''s deliveries are signed with, numbered per trigger (`n`, never reused). A '
    'secret is active until it is retired (`retired_at`) or its `expires_at` passed, by the database '
    'clock; at most two are active at once (a rotation). Each is encrypted under the seal key `key_id` '
    '(AES-256-GCM: `nonce`, `ciphertext` with its tag).';

CREATE TABLE trigger_deliveries (
    trigger     text NOT NULL REFERENCES triggers (name),
    delivery_id text NOT NULL CHECK (length(delivery_id) BETWEEN 1 AND 255),
    run_id      uuid NOT NULL REFERENCES runs (id),
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (trigger, delivery_id)
);
COMMENT ON TABLE trigger_deliveries IS
    'One row per signed delivery a trigger took (X-TicketIQ-Delivery, unique per trigger) and the run it '
    'started: a redelivery is answered with that run and starts nothing. The run itself carries the key '
    '`webhook<TAB><trigger><TAB><delivery id>`, so a delivery whose row was not yet written when its '
    'process died still finds its run.';

CREATE TABLE ticket_events (
    event_id      text NOT NULL CHECK (length(event_id) BETWEEN 1 AND 255),
    agent         text NOT NULL,
    run_id        uuid NOT NULL REFERENCES runs (id),
    webhook_event text NOT NULL,
    issue_key     text NOT NULL,
    body_sha256   text NOT NULL CHECK (body_sha256 ~ '^[0-9a-f]{64}$'),
    received_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_id, agent)
);
COMMENT ON TABLE ticket_events IS
    'Jira ticket events taken (X-Atlassian-Webhook-Identifier: `event_id`) and the run each agent that '
    'opted in for the event got: one run per (event, agent), a redelivery starts nothing. `body_sha256` '
    'finds a signed body replayed under another identifier (Jira does not sign that header).';
CREATE INDEX ticket_events_body ON ticket_events (body_sha256);
