-- name: for_run
SELECT id, at, kind, body FROM transcripts WHERE run_id = %(run_id)s AND id > %(after)s ORDER BY id LIMIT %(limit)s
