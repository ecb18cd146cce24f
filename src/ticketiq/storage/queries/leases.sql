-- name: renew
-- I4: every lease of a process in one statement; the answer lists the leases still ours.
-- Only the leases the process still drives: a lease its driver gave up lapses and is swept.
UPDATE leases SET expires_at = now() + make_interval(secs => %(ttl)s)
 WHERE holder = %(holder)s AND name IN (SELECT jsonb_array_elements_text(%(names)s))
RETURNING name

-- name: of_holder
SELECT name, expires_at FROM leases WHERE holder = %(holder)s ORDER BY name
