"""Ended runs made in bulk with generate_series, each with the rows a finished `reader` run leaves (a
checkpoint, 3 calls, 3 transcript rows, 2 audit rows, a kept answer handed on, an attempt): for the
retention pass's tests and bench/retention.py."""

from __future__ import annotations

from typing import Any

import psycopg

FILL = """
WITH r AS (
    INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status, created_at,
                      started_at, finished_at, answer)
    SELECT gen_random_uuid(), 'reader', 'bulk ' || g, 'ops-bot', 'acme', 'api', false, 'c', 'succeeded',
           now() - make_interval(secs => %(ago_s)s + 2), now() - make_interval(secs => %(ago_s)s + 1),
           now() - make_interval(secs => %(ago_s)s) + g * interval '1 microsecond', 'done'
      FROM generate_series(1, %(n)s) g
    RETURNING id
), c AS (
    INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, sealed_losses)
    SELECT id, 1, 3, '{}', 's', 'k', 1, 0 FROM r
), calls AS (
    INSERT INTO calls (run_id, step, idx, attempt, provider_call_id, tool, class, step_key, args, status)
    SELECT id, s, 0, 1, 'call_' || s, 'jira_get_issue', 'read', 'k' || s || id, '{}', 'done'
      FROM r, generate_series(1, 3) s
), t AS (
    INSERT INTO transcripts (run_id, kind, body) SELECT id, 'entries', '{"entries": []}' FROM r, generate_series(1, 3)
), a AS (
    INSERT INTO audit_log (action, run_id, actor, at) SELECT x, id, 'ops-bot', now() - make_interval(secs => %(ago_s)s)
      FROM r, unnest(ARRAY['agent.run.created', 'agent.run.succeeded']) x
), k AS (
    INSERT INTO answers (run_id, answer, seal, key_id, kept_until, handed_on_at)
    SELECT id, 'done', 's', 'k', now() + interval '1 day', now() FROM r
)
INSERT INTO run_attempts (run_id, attempt, process) SELECT id, 1, 'bulk' FROM r
"""


async def fill(url: str, n: int, ago_s: float, chunk: int = 50_000) -> None:
    """`n` runs that ended `ago_s` seconds ago, written `chunk` at a time."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        left = n
        while left > 0:
            size = min(chunk, left)
            params: dict[str, Any] = {"n": size, "ago_s": ago_s}
            await conn.execute(FILL, params)
            left -= size
        await conn.execute("ANALYZE")
