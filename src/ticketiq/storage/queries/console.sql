-- The console's sign-in sessions (migration 024). Statements see the SHA-256 hex of a session id, never
-- the id, and the name of the token a session acts as, never the token.

-- name: start
-- A session for an unrevoked token, with its audit row, in one statement; sessions that expired or whose
-- token was revoked (neither is ever found again) are purged by the same statement. No row when the
-- token was revoked meanwhile.
WITH purged AS (
    DELETE FROM console_sessions s
     WHERE s.expires_at < now()
        OR EXISTS (SELECT 1 FROM api_tokens t WHERE t.name = s.token_name AND t.revoked_at IS NOT NULL)
), session AS (
    INSERT INTO console_sessions (id_hash, token_name, csrf_secret, expires_at)
    SELECT %(id_hash)s, t.name, %(csrf_secret)s, now() + make_interval(secs => %(ttl_s)s)
      FROM api_tokens t
     WHERE t.name = %(name)s AND t.revoked_at IS NULL
    RETURNING token_name, expires_at
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'console.signed_in', session.token_name, jsonb_build_object('expires_at', session.expires_at)
      FROM session
)
SELECT token_name, expires_at FROM session

-- name: get
-- The session a cookie names, while it has not expired (database clock) and its token is not revoked.
SELECT s.token_name, s.csrf_secret, s.expires_at, t.role, t.agents
  FROM console_sessions s
  JOIN api_tokens t ON t.name = s.token_name AND t.revoked_at IS NULL
 WHERE s.id_hash = %(id_hash)s AND s.expires_at > now()

-- name: end
-- Sign-out: the row goes, with its audit row. No row when there was no such session. Every process is
-- told on `ticketiq_sessions` (the id's hash) once this commits: it ends the event streams the session
-- opened there (issue 32).
WITH ended AS (
    DELETE FROM console_sessions WHERE id_hash = %(id_hash)s
    RETURNING token_name, id_hash
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'console.signed_out', ended.token_name, '{}'::jsonb FROM ended
)
SELECT ended.token_name, pg_notify('ticketiq_sessions', ended.id_hash)::text AS told FROM ended

-- name: alive
-- Of these sessions (the ids' hashes), those still found as `get` finds one: unexpired, their token
-- unrevoked. The safety look of the streams sessions opened (views/follows.py).
SELECT s.id_hash
  FROM console_sessions s
  JOIN api_tokens t ON t.name = s.token_name AND t.revoked_at IS NULL
 WHERE s.id_hash = ANY(ARRAY(SELECT jsonb_array_elements_text(%(id_hashes)s))) AND s.expires_at > now()
