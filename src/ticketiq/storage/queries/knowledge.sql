-- The knowledge table: pages written by source syncs, and the full-text search agents read it by.

-- name: sync_page
-- One page of a source sync in ONE statement (I3: fenced on the job's attempt, also when it waited
-- on a takeover's lock): the page's issues upserted on (source, key), so none is ever there twice,
-- and the job's state (the cursor to the next page) and progress with them. A resume therefore goes
-- on from the page after the last one written. No row back: the job was taken over (nothing written).
WITH fence AS (
    SELECT id FROM jobs
    WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
    FOR UPDATE
),
page AS (
    INSERT INTO knowledge AS k (source, key, project, title, body, labels, status, updated_at, job_id)
    SELECT %(source)s, i.key, %(project)s, i.title, i.body, i.labels, i.status, i.updated_at, fence.id
    FROM fence
    CROSS JOIN jsonb_to_recordset(%(issues)s::jsonb)
        AS i (key text, title text, body text, labels text[], status text, updated_at timestamptz)
    ON CONFLICT (source, key) DO UPDATE
    SET project = excluded.project, title = excluded.title, body = excluded.body, labels = excluded.labels,
        status = excluded.status, updated_at = excluded.updated_at, job_id = excluded.job_id
    RETURNING k.key
),
moved AS (
    UPDATE jobs
    SET state = %(state)s, progress_done = %(done)s, progress_total = %(total)s
    FROM fence
    WHERE jobs.id = fence.id
    RETURNING jobs.id, jobs.cancel_requested_at
)
SELECT moved.id, moved.cancel_requested_at IS NOT NULL AS cancel_requested,
       (SELECT count(*) FROM page) AS written
FROM moved

-- name: search
-- Ranked full-text search (websearch syntax: words, "quoted phrases", -excluded, or), in one project
-- or all; the snippet is the body's best-matching fragment.
SELECT k.key, k.project, k.title, k.labels, k.status,
       ts_headline('english'::regconfig, k.body, q, 'MaxFragments=1, MaxWords=30, MinWords=8') AS snippet,
       ts_rank_cd(k.tsv, q) AS rank
FROM knowledge AS k, websearch_to_tsquery('english'::regconfig, %(query)s) AS q
WHERE k.tsv @@ q
  AND k.source = %(source)s
  AND (%(project)s::text IS NULL OR k.project = %(project)s)
ORDER BY rank DESC, k.key
LIMIT %(limit)s

-- name: count
-- How many issues a source holds for a project.
SELECT count(*) AS issues FROM knowledge WHERE source = %(source)s AND project = %(project)s
