-- A person's ad hoc tool calls from the inspector. Nothing here is written ahead for a resume: a call is
-- never sent again by anyone (I11: its key is fresh per call, or derived from the request's
-- Idempotency-Key), so only the audit log records it.

-- name: facts
-- Everything the inspector's gate needs, in one read: the tenant's quarantine, the `inspector`
-- channel, and the run-as principal (the operator's token name): whether it may act, its unrevoked
-- grants, and which tools need approval.
SELECT (SELECT q.reason FROM quarantines q WHERE q.kind = 'tenant' AND q.name = %(tenant)s) AS tenant_quarantine,
       coalesce((SELECT ch.enabled FROM channels ch WHERE ch.name = %(channel)s), true) AS channel_enabled,
       -- No row: the principal was never seeded, so it holds no grant either; the grant gate says so.
       coalesce((SELECT p.may_run FROM principals p WHERE p.name = %(principal)s), true) AS principal_may_run,
       coalesce((SELECT array_agg(g.tool) FROM grants g WHERE g.principal = %(principal)s AND NOT g.revoked),
                '{}') AS granted,
       coalesce((SELECT array_agg(t.tool) FROM tool_policies t WHERE t.needs_approval), '{}') AS needs_approval

-- name: audit
-- No run_id: an ad hoc call belongs to no run. The actor is the operator's token name.
INSERT INTO audit_log (action, actor, detail) VALUES (%(action)s, %(actor)s, %(detail)s)
RETURNING id

-- name: start
-- A write's start, on record before it is sent. No row when a start under this key is on record
-- already: a keyed request's retry whose first try began the write (migration 020's unique index), which
-- must not send it again.
INSERT INTO audit_log (action, actor, detail) VALUES ('inspector.call.started', %(actor)s, %(detail)s)
ON CONFLICT ((detail ->> 'key')) WHERE action = 'inspector.call.started' DO NOTHING
RETURNING id

-- name: outcome
-- The outcome on record for a call's key (its `inspector.call` row), if the call got that far.
SELECT id, detail ->> 'outcome' AS outcome, detail ->> 'error' AS error
  FROM audit_log
 WHERE action = 'inspector.call' AND detail ->> 'key' = %(key)s
 ORDER BY id
 LIMIT 1
