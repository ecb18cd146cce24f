-- Ended runs for export (`ticketiq runs export`, the retention pass's export before it deletes, issue 34):
-- reads only. Keyset pages in (finished_at, id) order. The ended runs live in two partial indexes of
-- migration 035: runs_purgeable (finished_at, unheld: nearly all of them) and runs_held_created (the few
-- held runs). Each half of the page is read through its own index, so no page scans the table; the held
-- half reads every held run, which the operator's holds keep few.

-- name: ended_page
-- The next page of runs that ended in [since, until), strictly after the cursor (after_at, after_id); the
-- first page's cursor is (since, the nil uuid), which no run's id is. Each half is limited first.
(SELECT id, finished_at FROM runs
  WHERE finished_at IS NOT NULL AND held_at IS NULL
    AND finished_at >= %(since)s::timestamptz AND finished_at < %(until)s::timestamptz
    AND (finished_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  ORDER BY finished_at, id LIMIT %(limit)s)
UNION ALL
(SELECT id, finished_at FROM runs
  WHERE finished_at IS NOT NULL AND held_at IS NOT NULL
    AND finished_at >= %(since)s::timestamptz AND finished_at < %(until)s::timestamptz
    AND (finished_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
  ORDER BY finished_at, id LIMIT %(limit)s)
ORDER BY finished_at, id LIMIT %(limit)s

-- name: ended_of
-- Of the given runs, those that ended, in (finished_at, id) order: a retention batch as it is written.
SELECT id, finished_at FROM runs
 WHERE id = ANY (ARRAY(SELECT jsonb_array_elements_text(%(run_ids)s)::uuid)) AND finished_at IS NOT NULL
 ORDER BY finished_at, id

-- name: now
-- The database's clock, which a span back from now (`--since 30d`) is counted from.
SELECT now() AS now
