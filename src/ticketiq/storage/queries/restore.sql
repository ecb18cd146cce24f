-- A database restored from a backup (`ticketiq db restore`, I24): what the restore asks of it before any
-- process starts on it.

-- name: tables
-- How many tables the database holds outside the catalogs: a restore goes only into an empty one.
SELECT count(*)::int AS n FROM pg_tables WHERE schemaname NOT IN ('pg_catalog', 'information_schema')

-- name: mark
-- I24: every run that had not ended at the backup's point is restored: each write it plans from now on is
-- settled as a call in doubt is before it is sent. Audited per run, `agent.run.restored`, with the backup.
WITH marked AS (
    UPDATE runs SET restored_at = now(), restored_from = %(label)s
     WHERE finished_at IS NULL
    RETURNING id, status
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.restored', m.id, 'ticketiq db restore',
           jsonb_build_object('backup', %(label)s::text, 'status', m.status)
      FROM marked m
)
SELECT count(*)::int AS n FROM marked
