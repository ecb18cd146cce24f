"""The large history the scale bench measures against: finished runs and what they leave behind,
inserted with generate_series (`bench/scale.py`'s sweep and run-list timings)."""

from __future__ import annotations

import time

import psycopg

FILL = [
    # Finished runs of every channel, over the last ~12 days, each with its checkpoint: three agents, a
    # token of four making most (`carol` one in a thousand), 2 % failed and 0.2 % stopped, and one input
    # in a hundred that speaks of an outage (the run list's filters each select some).
    """INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id, status, answer,
                         created_at, started_at, finished_at, idempotency_key, created_by)
       SELECT md5(g::text)::uuid, (ARRAY['reader', 'triage', 'writer'])[1 + g %% 3],
              'Read OPS-' || g || CASE WHEN g %% 100 = 0 THEN ' during the outage' ELSE '' END, 'ops-bot', 'acme',
              (ARRAY['api', 'cron', 'teams', 'copilot'])[1 + g %% 4], g %% 10 = 0, md5(g::text),
              CASE WHEN g %% 50 = 0 THEN 'failed' WHEN g %% 500 = 3 THEN 'stopped' ELSE 'succeeded' END, 'done',
              now() - make_interval(secs => g), now() - make_interval(secs => g), now() - make_interval(secs => g - 1),
              (ARRAY['api', 'cron', 'teams', 'copilot'])[1 + g %% 4] || E'\\t' || 'ops-bot' || E'\\t' || 'key-' || g,
              CASE WHEN g %% 1000 = 7 THEN 'carol' ELSE (ARRAY['ops', 'ana', 'bob', 'teams-bot'])[1 + g %% 4] END
         FROM generate_series(%(lo)s::int, %(hi)s::int) g""",
    """INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, sealed_losses)
       SELECT md5(g::text)::uuid, 1, 4, '{"step": 4}', 's', 'k', 1, 0
         FROM generate_series(%(lo)s::int, %(hi)s::int) g""",
    # A decided approval for every run that may wait, and an answered question.
    """INSERT INTO approvals (id, run_id, step, idx, tool, args, status, decided_by, decided_at, binding)
       SELECT gen_random_uuid(), md5(g::text)::uuid, 1, 0, 'jira_add_comment', '{}', 'approved', 'oncall', now(),
              'b' || g
         FROM generate_series(%(lo)s::int, %(hi)s::int) g WHERE g %% 10 = 0""",
    """INSERT INTO inputs (id, run_id, step, idx, question, status, text, given_by, given_at, answered_by)
       SELECT gen_random_uuid(), md5(g::text)::uuid, 1, 0, 'which env?', 'given', 'prod', 'oncall', now(),
              'key:oncall:k' || g
         FROM generate_series(%(lo)s::int, %(hi)s::int) g WHERE g %% 10 = 0""",
    # The cron runs' fires, with their outcomes; the Teams runs' inbox rows.
    """INSERT INTO schedule_fires (schedule_id, fire_at, run_key, run_id, fired_by, outcome, outcome_at)
       SELECT ('00000000-0000-0000-0000-0000000000' || lpad((g %% 100)::text, 2, '0'))::uuid,
              now() - make_interval(secs => g), 'cron-' || g, md5(g::text)::uuid, 'bench', 'done', now()
         FROM generate_series(%(lo)s::int, %(hi)s::int) g WHERE g %% 4 = 1""",
    """INSERT INTO teams_inbox (activity_id, conversation_id, content_hash, run_key, service_url, from_id, actor,
                                text, app_url, activity, received_at, run_id)
       SELECT 'a' || g, 'conv', md5('c' || g), 'teams-' || g, 'http://x', 'u', 'teams:u', 'hi', 'http://x', '{}',
              now() - make_interval(secs => g), md5(g::text)::uuid
         FROM generate_series(%(lo)s::int, %(hi)s::int) g WHERE g %% 4 = 2""",
]


async def fill(url: str, finished: int) -> float:
    """`finished` finished runs and what they leave behind; returns the seconds it took."""
    started = time.monotonic()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO schedules (id, agent, cron, timezone, input, next_fire_at, created_by) "
            "SELECT ('00000000-0000-0000-0000-0000000000' || lpad(g::text, 2, '0'))::uuid, 'reader', '0 * * * *', "
            "'UTC', 'x', now() + interval '1 hour', 'bench' FROM generate_series(0, 99) g"
        )
        await conn.execute(
            "INSERT INTO processes (id, lock_key, pid, host, started_at, ended_at) SELECT 'ended-' || g, "
            "nextval('process_lock_keys'), g, 'h', now() - interval '1 hour', now() - interval '30 minutes' "
            "FROM generate_series(1, 1000) g"
        )
        chunk = 100_000
        for lo in range(1, finished + 1, chunk):
            hi = min(finished, lo + chunk - 1)
            for statement in FILL:
                await conn.execute(statement, {"lo": lo, "hi": hi})
            print(f"    {hi} finished runs inserted ({time.monotonic() - started:.0f} s)", flush=True)
        await conn.execute("VACUUM ANALYZE")
    return time.monotonic() - started
