-- beside: previous
-- The claims' one way of giving runs out (migration 012): the sweeps of lapsed leases and of dead
-- processes differ only in which leases they pick, so the giving is one function.

-- The checkpoint leases named (`p_names`, which the caller has locked), each taken for the least loaded
-- live process (run_targets): what lands on the claimer it drives itself; another process is marked
-- handed and told (take_run's `p_handed`). `why` says which sweep took them: lapsed or dead.
CREATE FUNCTION give_runs(p_names text[], p_claimer text, p_ttl float8, p_why text)
RETURNS TABLE (run_id uuid, attempt integer, step integer, losses integer, state text, seal text,
               key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer,
               seal_format smallint, lease_expired_at timestamptz, why text, holder text)
LANGUAGE sql VOLATILE AS $$
    WITH picked AS (
        SELECT name, row_number() OVER (ORDER BY name) AS slot FROM unnest(p_names) AS name
    ), targets AS (
        -- Only when there is something to give: the look for targets costs more than the claim of nothing.
        SELECT t.slot, t.holder
          FROM (SELECT count(*)::int AS n FROM picked) c, LATERAL run_targets(p_claimer, c.n) t
         WHERE c.n > 0
    )
    SELECT t.*, p_why, targets.holder
      FROM picked JOIN targets USING (slot),
           LATERAL take_run(substr(picked.name, 12)::uuid, targets.holder, p_ttl, true,
                            CASE WHEN targets.holder <> p_claimer THEN p_why END) t
$$;
