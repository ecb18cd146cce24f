-- The cluster's seal key probe (I17): one fixed text sealed by the key that signs.

-- name: probe
SELECT key_id, seal FROM seal_probe

-- name: offer_probe
-- The first process of a cluster writes the probe; later ones find it.
INSERT INTO seal_probe (key_id, seal) VALUES (%(key_id)s, %(seal)s) ON CONFLICT (only_row) DO NOTHING

-- name: move_probe
-- A process whose signing key differs from the probe's, and which verified the probe with its other
-- keys, moves the probe to the key it signs with (the second roll of a key rotation).
UPDATE seal_probe SET key_id = %(key_id)s, seal = %(seal)s, made_at = now() WHERE key_id = %(was)s
