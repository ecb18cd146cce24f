-- beside: previous
-- Issue 19: what the gates know of a run beside its own row (quarantines of its agent and tenant, its
-- channel, its owner's standing and grants, the tools that need approval), in one function, so the take
-- of a run (runs.acquire, runs.create_taken) reads the facts in the very statement that takes it, and the
-- run's first step needs no read of its own. runs.gate_facts reads the same through it.
CREATE FUNCTION gate_context(p_agent text, p_tenant text, p_owner text, p_channel text)
RETURNS TABLE (agent_quarantine text, tenant_quarantine text, channel_enabled boolean, owner_may_run boolean,
               granted text[], needs_approval text[])
LANGUAGE sql STABLE AS $$
    SELECT (SELECT q.reason FROM quarantines q WHERE q.kind = 'agent' AND q.name = p_agent),
           (SELECT q.reason FROM quarantines q WHERE q.kind = 'tenant' AND q.name = p_tenant),
           coalesce((SELECT ch.enabled FROM channels ch WHERE ch.name = p_channel), true),
           coalesce((SELECT p.may_run FROM principals p WHERE p.name = p_owner), false),
           coalesce((SELECT array_agg(g.tool) FROM grants g WHERE g.principal = p_owner AND NOT g.revoked), '{}'),
           coalesce((SELECT array_agg(t.tool) FROM tool_policies t WHERE t.needs_approval), '{}')
$$;
