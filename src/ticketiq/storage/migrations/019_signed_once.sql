-- beside: previous
-- I19: a signed request counts once (issue 15).
--
-- A webhook's signature covers "<t>.<body>", not X-TicketIQ-Delivery, and Jira signs no identifier:
-- deduping by the sender's id alone let anyone who saw one signed request send it again under ids of
-- their own. Every accepted signed request now claims what was signed, bound to the id it first came
-- with, before anything else is stored.
--
-- And a creating POST retried after a crash (the thing made, the Idempotency-Key's answer not kept)
-- finds what the first one made: a trigger, or a trigger's secret, carries the key of the request that
-- made it.

CREATE TABLE signed_requests (
    source      text NOT NULL CHECK (length(source) BETWEEN 1 AND 200),
    digest      text NOT NULL CHECK (digest ~ '^[0-9a-f]{64}$'),
    delivery_id text NOT NULL CHECK (length(delivery_id) BETWEEN 1 AND 255),
    received_at timestamptz NOT NULL DEFAULT now(),
    kept_until  timestamptz,
    PRIMARY KEY (source, digest)
);
COMMENT ON TABLE signed_requests IS
    'What each accepted signed request signed, claimed once: `source` is `trigger:<name>` for a webhook '
    '(`digest`: SHA-256 of the trigger, t and body as signed) or `jira` for a ticket event (`digest`: the '
    'raw body''s SHA-256, as Jira signs no timestamp). `delivery_id` is the delivery id (event identifier) '
    'the signed content first came with: the same content under another id is a replay and starts '
    'nothing. A webhook claim is kept until `kept_until` (its t plus the signature''s window and a '
    'margin; past it the signature is refused as stale anyway), then the leader purges it; a Jira claim '
    '(`kept_until` NULL) is kept as long as the ticket_events rows.';
CREATE INDEX signed_requests_kept_until ON signed_requests (kept_until) WHERE kept_until IS NOT NULL;

-- The events taken before this migration keep their claim: the first identifier each body came with.
INSERT INTO signed_requests (source, digest, delivery_id, received_at)
SELECT DISTINCT ON (body_sha256) 'jira', body_sha256, event_id, received_at
  FROM ticket_events
 ORDER BY body_sha256, received_at, event_id;

-- Replays are found by the claim now, not by a look-up of the body's digest.
DROP INDEX ticket_events_body;
COMMENT ON TABLE ticket_events IS
    'Jira ticket events taken (X-Atlassian-Webhook-Identifier: `event_id`) and the run each agent that '
    'opted in for the event got: one run per (event, agent), a redelivery starts nothing. The body''s '
    'claim (signed_requests, source `jira`) finds a signed body replayed under another identifier (Jira '
    'does not sign that header); `body_sha256` is its digest.';

ALTER TABLE triggers ADD COLUMN request_key uuid;
COMMENT ON COLUMN triggers.request_key IS
    'Derived from the token and the Idempotency-Key of the request that declared it (NULL without a '
    'key): that request, retried after a crash, is answered with this trigger, not "exists".';

ALTER TABLE trigger_secrets ADD COLUMN request_key uuid;
CREATE UNIQUE INDEX trigger_secrets_request ON trigger_secrets (trigger, request_key);
COMMENT ON COLUMN trigger_secrets.request_key IS
    'Derived from the token and the Idempotency-Key of the request that added it (NULL without a key): '
    'that request, retried after a crash, finds this secret instead of adding another.';
