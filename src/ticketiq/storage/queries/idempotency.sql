-- Idempotency-Key claims and kept answers (migration 008). A claim is (holder, created_at): a request
-- finishes or releases only its own claim, never one a repeat took over meanwhile.

-- name: claim
-- A first use: the key is claimed for this request. No row when the key is taken (or being taken).
INSERT INTO idempotency_keys (scope, principal, key, request_hash, state, holder, expires_at)
VALUES (%(scope)s, %(principal)s, %(key)s, %(request_hash)s, 'working', %(holder)s,
        now() + make_interval(secs => %(claim_s)s))
ON CONFLICT DO NOTHING
RETURNING created_at

-- name: get
-- The key's row, the database clock, and whether the process answering it still lives. Read after a
-- claim found the key taken: its answer (replayed, or refused) rests on the row, so the row is made
-- durable first (I20, migration 026).
SELECT request_hash, state, status_code, response, holder, expires_at, now() AS now,
       state = 'working' AND process_alive(holder) AS holder_alive, durable() AS durable
  FROM idempotency_keys
 WHERE scope = %(scope)s AND principal = %(principal)s AND key = %(key)s

-- name: take_over
-- The claim of a request no one answers any more (its claim lapsed, or its process's liveness mark is
-- free), taken by a repeat of the same request. Conditional: of two repeats racing, one wins.
UPDATE idempotency_keys
   SET holder = %(holder)s, created_at = now(), expires_at = now() + make_interval(secs => %(claim_s)s)
 WHERE scope = %(scope)s AND principal = %(principal)s AND key = %(key)s
   AND state = 'working' AND request_hash = %(request_hash)s
   AND (expires_at <= now() OR NOT process_alive(holder))
RETURNING created_at

-- name: finish
-- The answer kept for repeats. Matches nothing when the claim was taken over meanwhile. `run_id`: the run
-- the answer is about, when that run exists, so that the retention pass deletes the key with it.
UPDATE idempotency_keys
   SET state = 'done', status_code = %(status_code)s, response = %(response)s, expires_at = NULL,
       answered_at = now(), run_id = (SELECT r.id FROM runs r WHERE r.id = %(run_id)s::uuid)
 WHERE scope = %(scope)s AND principal = %(principal)s AND key = %(key)s
   AND state = 'working' AND holder = %(holder)s AND created_at = %(claimed_at)s

-- name: release
-- Nothing was made (a refusal, a failure): the key is free for a retry.
DELETE FROM idempotency_keys
 WHERE scope = %(scope)s AND principal = %(principal)s AND key = %(key)s
   AND state = 'working' AND holder = %(holder)s AND created_at = %(claimed_at)s
