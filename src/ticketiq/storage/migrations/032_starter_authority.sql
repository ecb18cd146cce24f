-- beside: previous
-- Issue 32: a delegation starts only what the run's starter could start itself. The gates' facts of a run
-- now carry its starter (runs.created_by: the API token that started it; a child's is its parent's) and
-- what that token may do as it stands now (its role, the agents it may start, whether it was revoked), read
-- in the same statements that read the rest (runs.acquire, runs.create_taken, runs.gate_facts). The
-- engine decides (engine/gates.py delegation_gate). Only adds a function: the previous release runs beside.

-- One row always: no starter (a run an entry point started: a cron fire, a Teams turn, a signed hook) or a
-- token row gone leaves role and agents NULL.
CREATE FUNCTION starter_authority(p_created_by text)
RETURNS TABLE (starter text, starter_role text, starter_agents text[], starter_revoked boolean)
LANGUAGE sql STABLE AS $$
    SELECT p_created_by, t.role, t.agents, coalesce(t.revoked_at IS NOT NULL, false)
      FROM (SELECT 1) one LEFT JOIN api_tokens t ON t.name = p_created_by
$$;
