-- beside: previous
-- Issue 31: a process that stops cleanly hands its runs over to the others at once (process.stop calls
-- runs.hand for each run it handed back). run_targets took the claimer itself always, draining or not, so
-- such a hand could give a run back to the very process that is stopping. The claimer is now one of the
-- targets only while it is not draining; with no other live process the run stays queued, for the sweep
-- of whichever process comes next. Otherwise as migration 012 made it.
CREATE OR REPLACE FUNCTION run_targets(p_claimer text, p_n integer)
RETURNS TABLE (slot bigint, holder text)
LANGUAGE sql STABLE AS $$
    WITH live AS (
        SELECT p_claimer AS id
         WHERE NOT EXISTS (SELECT 1 FROM processes p WHERE p.id = p_claimer AND p.draining_at IS NOT NULL)
         UNION
        SELECT p.id FROM processes p
         WHERE p_n > 0 AND p.ended_at IS NULL AND p.draining_at IS NULL AND process_alive(p.id)
           AND NOT EXISTS (SELECT 1 FROM leases l
                            WHERE l.holder = p.id AND l.expires_at < now() AND l.name LIKE 'checkpoint:%')
    ), load AS (
        SELECT live.id, (SELECT count(*) FROM leases l WHERE l.holder = live.id AND l.name LIKE 'checkpoint:%') AS held,
               (SELECT p.started_at FROM processes p WHERE p.id = live.id) AS started_at
          FROM live
    ), slots AS (
        SELECT load.id, load.started_at, load.held + k AS level FROM load, generate_series(0, p_n - 1) AS k
    )
    SELECT row_number() OVER (ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id), id
      FROM slots
     ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id
     LIMIT greatest(p_n, 0)
$$;
