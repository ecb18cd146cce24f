-- Classifier training (issue 10; I13): the knowledge rows it learns from, and the model it leaves. A
-- classifier_training job is never resumed: its one write is fenced by its attempt (I3) and FOR SHARE
-- waits for a concurrent sweep, then sees the job interrupted and writes nothing.

-- name: knowledge_rows
-- Every knowledge row of the project (all projects when NULL), in key order, with its labels.
SELECT source || ':' || key AS key, coalesce(title, '') || E'\n' || coalesce(body, '') AS text,
       coalesce(labels, '{}'::text[]) AS labels
  FROM knowledge
 WHERE %(project)s::text IS NULL OR project = %(project)s
 ORDER BY source, key

-- name: record
-- I3: the trained model, written once at the end by the attempt that trained it.
WITH fence AS (
    SELECT id FROM jobs
     WHERE job_holds(jobs, %(job_id)s, %(attempt)s)
       FOR SHARE
)
INSERT INTO classifiers (id, job_id, project, classes, rows_trained, rows_held_out, accuracy, epochs, model)
SELECT %(id)s::uuid, fence.id, %(project)s::text,
       -- a list travels as jsonb (storage/database.py): the classes, in their order, as text[]
       ARRAY(SELECT c FROM jsonb_array_elements_text(%(classes)s::jsonb) WITH ORDINALITY AS t (c, n) ORDER BY n),
       %(rows_trained)s::int, %(rows_held_out)s::int, %(accuracy)s::float8, %(epochs)s::int,
       %(model)s::jsonb
  FROM fence
RETURNING id, trained_at
