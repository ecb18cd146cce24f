-- The gates' state. Seeding from the agents file never undoes what a person changed: it inserts only
-- what is missing (a revoked grant stays revoked).

-- name: seed_principal
INSERT INTO principals (name) VALUES (%(name)s) ON CONFLICT (name) DO NOTHING

-- name: seed_grant
INSERT INTO grants (principal, tool) VALUES (%(principal)s, %(tool)s) ON CONFLICT (principal, tool) DO NOTHING

-- name: seed_policy
INSERT INTO tool_policies (tool, needs_approval) VALUES (%(tool)s, %(needs_approval)s)
ON CONFLICT (tool) DO NOTHING

-- name: quarantine
INSERT INTO quarantines (kind, name, reason) VALUES (%(kind)s, %(name)s, %(reason)s)
ON CONFLICT (kind, name) DO UPDATE SET reason = EXCLUDED.reason, at = now()

-- name: release_quarantine
DELETE FROM quarantines WHERE kind = %(kind)s AND name = %(name)s

-- name: set_channel
INSERT INTO channels (name, enabled) VALUES (%(name)s, %(enabled)s)
ON CONFLICT (name) DO UPDATE SET enabled = EXCLUDED.enabled, updated_at = now()

-- name: set_grant
INSERT INTO grants (principal, tool, revoked) VALUES (%(principal)s, %(tool)s, NOT %(granted)s)
ON CONFLICT (principal, tool) DO UPDATE SET revoked = EXCLUDED.revoked, at = now()

-- name: set_may_run
INSERT INTO principals (name, may_run) VALUES (%(name)s, %(may_run)s)
ON CONFLICT (name) DO UPDATE SET may_run = EXCLUDED.may_run, updated_at = now()

-- name: set_policy
INSERT INTO tool_policies (tool, needs_approval) VALUES (%(tool)s, %(needs_approval)s)
ON CONFLICT (tool) DO UPDATE SET needs_approval = EXCLUDED.needs_approval, updated_at = now()

-- name: state
SELECT
  (SELECT coalesce(jsonb_agg(jsonb_build_object('kind', kind, 'name', name, 'reason', reason)), '[]')
     FROM quarantines) AS quarantines,
  (SELECT coalesce(jsonb_agg(jsonb_build_object('name', name, 'enabled', enabled)), '[]') FROM channels) AS channels,
  (SELECT coalesce(jsonb_agg(jsonb_build_object('name', name, 'may_run', may_run)), '[]') FROM principals)
     AS principals,
  (SELECT coalesce(jsonb_agg(jsonb_build_object('principal', principal, 'tool', tool, 'revoked', revoked)), '[]')
     FROM grants) AS grants,
  (SELECT coalesce(jsonb_agg(jsonb_build_object('tool', tool, 'needs_approval', needs_approval)), '[]')
     FROM tool_policies) AS policies

-- name: audit
INSERT INTO audit_log (action, run_id, actor, detail) VALUES ('gate.changed', NULL, %(by)s, %(detail)s)
