-- The app processes (GET /v1/processes), and what each says of its MCP servers.

-- name: live
-- Every process that has not ended, oldest first: whether its liveness mark is held (process_alive),
-- whether it leads (holds the leader lease, unexpired), whether it drains (a clean stop began), when
-- it was found stalled, and the runs and jobs whose leases it holds (given to it and not yet taken up
-- included). Through leases_holder: one look per process.
SELECT p.id, p.host, p.pid, p.version, p.build_commit AS commit,
       -- The newest checkpoint formats it resumes (migration 031; NULL: an older release, which knew these).
       coalesce(p.state_format, 1) AS state_format, coalesce(p.seal_format, 2) AS seal_format,
       -- How its MCP servers answer it (migration 034; NULL: none declared, or an older release).
       coalesce(p.mcp_servers, '[]'::jsonb) AS mcp_servers,
       p.started_at, process_alive(p.id) AS alive,
       p.draining_at IS NOT NULL AS draining,
       p.stalled_at,
       EXISTS (SELECT 1 FROM leases l WHERE l.holder = p.id AND l.name = 'leader' AND l.expires_at >= now())
           AS leader,
       coalesce(array(SELECT substr(l.name, 12) FROM leases l
                       WHERE l.holder = p.id AND l.name LIKE 'checkpoint:%%' ORDER BY l.name), '{}') AS runs,
       coalesce(array(SELECT substr(l.name, 5) FROM leases l
                       WHERE l.holder = p.id AND l.name LIKE 'job:%%' ORDER BY l.name), '{}') AS jobs
  FROM processes p
 WHERE p.ended_at IS NULL
 ORDER BY p.started_at, p.id

-- name: report_mcp
-- A process says how its MCP servers answer it now (tools/mcp_link.py), each time a state changes. Only
-- its own row, and only while it has not ended.
UPDATE processes SET mcp_servers = %(servers)s
 WHERE id = %(id)s AND ended_at IS NULL

-- name: ended
-- The last processes that ended, newest first, and how (processes.ended_how: stopped, died, stalled;
-- NULL for one that ended before migration 022). Rows are kept a day after the process ended (the retention pass, values/retention.py).
SELECT p.id, p.host, p.pid, p.version, p.build_commit AS commit, p.started_at, p.ended_at, p.ended_how AS how
  FROM processes p
 WHERE p.ended_at IS NOT NULL
 ORDER BY p.ended_at DESC, p.id DESC
 LIMIT %(limit)s

-- name: synchrony
-- How many copies a commit acknowledged now has: the standbys this primary streams to and which of
-- them a commit waits for (pg_auto_failover empties synchronous_standby_names while the standby is
-- gone: `wait_primary`, one copy). On the embedded server: no standby, one copy.
SELECT current_setting('synchronous_standby_names') AS standby_names,
       current_setting('synchronous_commit') AS synchronous_commit,
       (SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming')::int AS streaming,
       (SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))::int AS synchronous
