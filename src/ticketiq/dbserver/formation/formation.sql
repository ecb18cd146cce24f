-- The formation's statements: on the monitor (its pg_auto_failover database, as autoctl_node) and the
-- write probe on the nodes. Loaded by dbserver/formation/monitor.py as formation.<name>.

-- name: nodes
-- Every node of the default formation, as the monitor sees it now (its clock for the report's age).
SELECT nodeid AS node_id,
       nodename AS name,
       nodeport AS port,
       reportedstate::text AS reported,
       goalstate::text AS assigned,
       health,
       reportedpgisrunning AS pg_running,
       reportedrepstate::text AS replication,
       reportedlsn::text AS lsn,
       reportedtli AS timeline,
       extract(epoch FROM now() - reporttime)::float8 AS reported_ago_s
  FROM pgautofailover.node
 WHERE formationid = 'default'
 ORDER BY nodeid;

-- name: number_sync_standbys
SELECT number_sync_standbys FROM pgautofailover.formation WHERE formationid = 'default';

-- name: write_probe
-- A transaction id makes the commit write WAL, so it waits for the synchronous standby as a write of
-- the app's would, and touches no table.
SELECT txid_current() AS xid;
