-- API bearer tokens (DESIGN.md, "Who may do what"). Statements see only the token's SHA-256 hex, never
-- the token; no statement returns the hash except the one a request is authenticated by.

-- name: create
-- The token and its audit row in one statement. A name that exists (revoked or not) inserts nothing
-- and returns no row: names are never reused.
WITH token AS (
    INSERT INTO api_tokens (name, role, agents, token_hash)
    VALUES (%(name)s, %(role)s,
            (SELECT array_agg(a ORDER BY a) FROM jsonb_array_elements_text(%(agents)s::jsonb) AS a),
            %(token_hash)s)
    ON CONFLICT DO NOTHING
    RETURNING name, role, agents, created_at, revoked_at
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'token.created', %(actor)s,
           jsonb_build_object('name', token.name, 'role', token.role, 'agents', to_jsonb(token.agents))
      FROM token
)
SELECT name, role, agents, created_at, revoked_at FROM token

-- name: revoke
-- Revoked at once: the next request with the token is refused. No row when there is no such token or
-- it was revoked already.
WITH token AS (
    UPDATE api_tokens SET revoked_at = now()
     WHERE name = %(name)s AND revoked_at IS NULL
    RETURNING name, role, agents, created_at, revoked_at
), audit AS (
    INSERT INTO audit_log (action, actor, detail)
    SELECT 'token.revoked', %(actor)s, jsonb_build_object('name', token.name, 'role', token.role) FROM token
)
SELECT name, role, agents, created_at, revoked_at FROM token

-- name: get
-- Read when a revoke matched nothing: "revoked already" is answered from it, so it is made durable first
-- (I20, migration 026).
SELECT name, role, agents, created_at, revoked_at, durable() AS durable FROM api_tokens WHERE name = %(name)s

-- name: list
SELECT name, role, agents, created_at, revoked_at FROM api_tokens ORDER BY created_at, name

-- name: credential
-- A request's token, by its hash (the unique index), while it is not revoked.
SELECT name, role, agents, token_hash FROM api_tokens WHERE token_hash = %(token_hash)s AND revoked_at IS NULL

-- name: unrevoked
-- Of these token names, those not revoked: the safety look of the streams opened with them
-- (views/follows.py), beside the revocations heard on `ticketiq_tokens`.
SELECT name FROM api_tokens WHERE name = ANY(ARRAY(SELECT jsonb_array_elements_text(%(names)s))) AND revoked_at IS NULL
