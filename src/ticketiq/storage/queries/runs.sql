-- Runs and their checkpoints. Every statement about a running run is fenced by its attempt (I3): it
-- matches the checkpoint row only while that row still belongs to the writing attempt.

-- name: create
-- One statement: the run, its first checkpoint (attempt 0, step 0) and its audit row land together or
-- not at all. A repeated Idempotency-Key inserts nothing and returns no row.
WITH run AS (
    INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id,
                      parent_run_id, delegation_key, idempotency_key, request_hash, created_by)
    VALUES (%(id)s, %(agent)s, %(input)s, %(owner)s, %(tenant)s, %(channel)s, %(may_wait)s,
            %(correlation_id)s, %(parent_run_id)s, %(delegation_key)s, %(idempotency_key)s, %(request_hash)s,
            %(created_by)s)
    ON CONFLICT DO NOTHING
    RETURNING id, status
), checkpoint AS (
    INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, sealed_losses,
                             state_format, seal_format)
    SELECT run.id, 0, 0, %(state)s, %(seal)s, %(key_id)s, 0, 0, %(state_format)s, %(seal_format)s FROM run
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT run.id, 'input', jsonb_build_object('agent', %(agent)s::text, 'input', %(input)s::text) FROM run
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.created', run.id, %(actor)s, %(audit)s::jsonb || jsonb_build_object('status', run.status)
      FROM run
)
SELECT id, status FROM run

-- name: create_taken
-- `create` and `acquire` of a run born on this process, in one statement: the run is born `running`
-- under attempt 1, its lease held by %(holder)s and its attempt's row opened, as take_run would leave a
-- run it took from `queued` (migration 023). Nothing is fenced that `acquire` fences: no other process
-- can have held a run that did not exist, and the attempt the driver is bound to (I3) is the one this
-- statement wrote. A repeated key inserts nothing and returns no row. The audit row names the status the
-- run was born with, which a repeat of its creating request answers (`by_idempotency_key`). With the
-- gates' facts of the run as born (no Stop yet; gate_context, migration 028), as `acquire` gives them.
WITH run AS (
    INSERT INTO runs (id, agent, input, owner, tenant, channel, may_wait, correlation_id,
                      parent_run_id, delegation_key, idempotency_key, request_hash, created_by, status, started_at)
    VALUES (%(id)s, %(agent)s, %(input)s, %(owner)s, %(tenant)s, %(channel)s, %(may_wait)s,
            %(correlation_id)s, %(parent_run_id)s, %(delegation_key)s, %(idempotency_key)s, %(request_hash)s,
            %(created_by)s, 'running', now())
    ON CONFLICT DO NOTHING
    RETURNING id, status
), checkpoint AS (
    INSERT INTO checkpoints (run_id, attempt, step, state, seal, key_id, sealed_attempt, sealed_losses,
                             state_format, seal_format)
    SELECT run.id, 1, 0, %(state)s, %(seal)s, %(key_id)s, 0, 0, %(state_format)s, %(seal_format)s FROM run
    RETURNING run_id, attempt, step, losses, state, seal, key_id, prev_seal, sealed_attempt, sealed_losses,
              seal_format, state_format
), lease AS (
    INSERT INTO leases (name, holder, expires_at)
    SELECT 'checkpoint:' || run.id::text, %(holder)s, now() + make_interval(secs => %(ttl)s) FROM run
), attempt AS (
    INSERT INTO run_attempts (run_id, attempt, process) SELECT run.id, 1, %(holder)s FROM run
), note AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT run.id, 'input', jsonb_build_object('agent', %(agent)s::text, 'input', %(input)s::text) FROM run
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.created', run.id, %(actor)s, %(audit)s::jsonb || jsonb_build_object('status', run.status)
      FROM run
)
SELECT c.*, NULL::timestamptz AS lease_expired_at, 'acquired' AS why, run.status AS run_status,
       %(agent)s AS agent, %(tenant)s AS tenant, %(owner)s AS owner, %(channel)s AS channel,
       %(may_wait)s::boolean AS may_wait, NULL::text AS stopped_by, NULL::timestamptz AS restored_at,
       NULL::text AS restored_from, g.*, s.*
  FROM run, checkpoint c, LATERAL gate_context(%(agent)s, %(tenant)s, %(owner)s, %(channel)s) g,
       LATERAL starter_authority(%(created_by)s) s

-- name: by_idempotency_key
-- The run made under a key, with what its maker checks before it takes the run as its own (I19,
-- run_keys.foreign): its channel, agent, token, and the actor its creation was audited by. Read after
-- `create` found the key taken, and answered as "made already": durable first (I20, migration 026). With
-- the status the run was born with, as its creation's audit row names it (`born_status`: what the first
-- request answered; a run made before that was named: `running` once it was ever taken, else `queued`).
SELECT r.id, r.status, r.request_hash, r.created_by, r.channel, r.agent, made.actor AS made_by,
       coalesce(made.detail->>'status', CASE WHEN r.started_at IS NULL THEN 'queued' ELSE 'running' END)
           AS born_status,
       durable() AS durable
  FROM runs r
  LEFT JOIN LATERAL (SELECT a.actor, a.detail FROM audit_log a
                      WHERE a.run_id = r.id AND a.action = 'agent.run.created'
                      ORDER BY a.id LIMIT 1) made ON true
 WHERE r.idempotency_key = %(key)s

-- name: by_delegation_key
-- The child a delegation made before (asked again by its key, I9): durable first (I20, migration 026).
SELECT id, status, answer, error, durable() AS durable FROM runs WHERE delegation_key = %(key)s

-- name: get
SELECT r.id, r.agent, r.input, r.owner, r.tenant, r.channel, r.may_wait, r.correlation_id, r.parent_run_id,
       r.status, r.answer, r.error, r.stop_requested_at, r.stopped_by, r.created_by,
       r.created_at, r.started_at, r.finished_at, r.held_at, r.held_by, r.hold_reason, r.restored_at, r.restored_from,
       c.attempt, c.step, c.losses, c.written_at AS checkpoint_at, c.state_format, c.seal_format,
       greatest(coalesce(r.updated_at, r.finished_at, r.started_at, r.created_at), c.written_at) AS updated_at
  FROM runs r JOIN checkpoints c ON c.run_id = r.id
 WHERE r.id = %(run_id)s

-- name: status
SELECT status, answer, error FROM runs WHERE id = %(run_id)s

-- name: traceparent
-- The W3C traceparent the run was started under, kept in its checkpoint's state (runtime/tracing.py).
SELECT state::jsonb ->> 'traceparent' AS traceparent FROM checkpoints WHERE run_id = %(run_id)s

-- name: acquire
-- Take a queued or waiting run that no live lease holds, or one handed back while it handed on its
-- kept answer (`answered`, I12): the lease and a new attempt (take_run). Returns the checkpoint to
-- start from, with the run's status as the take left it (take_run keeps `answered`, else makes it
-- `running`), so no read follows; or no row when another process has it. With the gates' facts, read in
-- the take (gate_context, migration 028; its starter's authority, 032): the run's first step reads none of
-- its own.
WITH run AS (
    SELECT r.id, r.status, r.agent, r.tenant, r.owner, r.channel, r.may_wait, r.stopped_by, r.created_by,
           r.restored_at, r.restored_from
      FROM runs r
     WHERE r.id = %(run_id)s AND r.status IN ('queued', 'waiting', 'answered')
       AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = 'checkpoint:' || r.id::text AND l.expires_at >= now())
       FOR UPDATE
)
SELECT t.*, 'acquired' AS why, CASE WHEN run.status = 'answered' THEN 'answered' ELSE 'running' END AS run_status,
       run.agent, run.tenant, run.owner, run.channel, run.may_wait, run.stopped_by, run.restored_at, run.restored_from,
       g.*, s.*
  FROM run, LATERAL take_run(run.id, %(holder)s, %(ttl)s, false) t,
       LATERAL gate_context(run.agent, run.tenant, run.owner, run.channel) g,
       LATERAL starter_authority(run.created_by) s

-- name: hand
-- What `acquire` takes, taken for the least loaded live process (run_targets, migration 012): this one,
-- which drives it, or another, told to take it up (the leader's starts: orphaned queued runs, runs
-- whose wait was decided, cron fires, unstarted Teams turns). Returns the checkpoint and the process
-- it went to, or no row when another process has it.
WITH run AS (
    SELECT r.id FROM runs r
     WHERE r.id = %(run_id)s AND r.status IN ('queued', 'waiting', 'answered')
       AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = 'checkpoint:' || r.id::text AND l.expires_at >= now())
       FOR UPDATE
), target AS (
    SELECT t.holder FROM (SELECT count(*)::int AS n FROM run) c, LATERAL run_targets(%(holder)s, c.n) t WHERE c.n > 0
)
SELECT t.*, 'acquired' AS why, target.holder
  FROM run, target,
       LATERAL take_run(run.id, target.holder, %(ttl)s, false,
                        CASE WHEN target.holder <> %(holder)s THEN 'acquired' END) t

-- name: write_checkpoint
-- I1: the sealed checkpoint in ONE statement, before any call of the step is made. The same statement
-- lands the previous step's reads and refused calls (done, with their outcomes) and the transcript
-- entries, so a read-only step costs exactly this one write.
WITH checkpoint AS (
    SELECT seal_checkpoint(%(run_id)s, %(attempt)s, %(step)s, %(state)s, %(seal)s, %(key_id)s, %(prev_seal)s,
                           %(losses)s, %(state_format)s::smallint, %(seal_format)s::smallint) AS run_id
), finished AS (
    SELECT land_finished(checkpoint.run_id, %(attempt)s, %(finished)s) FROM checkpoint
), opened AS (
    -- `opening`: the attempt's first checkpoint (after a takeover, its reseal), when the run went on
    -- (run_attempts); on every other checkpoint this is skipped before it reads a row.
    UPDATE run_attempts a SET first_at = now()
      FROM checkpoint
     WHERE %(opening)s AND a.run_id = checkpoint.run_id AND a.attempt = %(attempt)s AND a.first_at IS NULL
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT checkpoint.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM checkpoint
)
SELECT checkpoint.run_id FROM checkpoint, finished

-- name: end
-- The run ends (succeeded, failed, stopped): final checkpoint, status, lease released, the last finished
-- calls, transcript and audit, and the requests it still held withdrawn, in one fenced statement. (A run
-- that waits is suspended by `suspend`.)
WITH checkpoint AS (
    SELECT seal_checkpoint(%(run_id)s, %(attempt)s, %(step)s, %(state)s, %(seal)s, %(key_id)s, %(prev_seal)s,
                           %(losses)s, %(state_format)s::smallint, %(seal_format)s::smallint) AS run_id
), finished AS (
    SELECT land_finished(checkpoint.run_id, %(attempt)s, %(finished)s) FROM checkpoint
), run AS (
    UPDATE runs
       SET status = %(status)s, answer = %(answer)s, error = %(error)s,
           finished_at = CASE WHEN %(status)s IN ('succeeded', 'failed', 'interrupted', 'stopped') THEN now() END
      FROM checkpoint WHERE runs.id = checkpoint.run_id
), lease AS (
    DELETE FROM leases USING checkpoint WHERE leases.name = 'checkpoint:' || checkpoint.run_id::text
), attempt_ended AS (
    UPDATE run_attempts a SET ended_at = now(), ended = 'finished', first_at = coalesce(a.first_at, now())
      FROM checkpoint
     WHERE a.run_id = checkpoint.run_id AND a.attempt = %(attempt)s
), kept AS (
    -- I12: the final answer, sealed, kept in the statement that ends the run.
    INSERT INTO answers (run_id, answer, seal, key_id, kept_until, handed_on_at)
    SELECT checkpoint.run_id, %(answer)s, %(answer_seal)s, %(answer_key_id)s,
           now() + make_interval(secs => %(answer_ttl)s), now()
      FROM checkpoint WHERE %(answer)s::text IS NOT NULL
    ON CONFLICT (run_id) DO NOTHING
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT checkpoint.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM checkpoint
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT %(action)s, checkpoint.run_id, %(actor)s, %(audit)s FROM checkpoint
), withdrawn AS (
    -- A run that ends takes back the requests it still waited on (a gate that failed it on resume, the
    -- loss limit, a Stop at a step): none stays pending for a person to decide in vain (issue 32).
    UPDATE approvals a
       SET status = 'withdrawn', decided_at = now(),
           reason = 'its run ended (' || %(status)s::text || ')' || coalesce(': ' || %(error)s::text, '')
      FROM checkpoint
     WHERE a.run_id = checkpoint.run_id AND a.status = 'pending'
    RETURNING a.id, a.run_id, a.step, a.idx, a.tool, a.binding, a.reason
), withdrawn_notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT w.run_id, 'approval', jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'status', 'withdrawn',
                                                    'reason', w.reason)
      FROM withdrawn w
), withdrawn_audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.withdrawn', w.run_id, %(actor)s,
           jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'step', w.step, 'idx', w.idx,
                              'binding', w.binding, 'reason', w.reason)
      FROM withdrawn w
)
SELECT checkpoint.run_id FROM checkpoint, finished

-- name: answered
-- I12: the model gave its final answer; handing it on is a step of its own, written ahead here. The
-- answer is kept, sealed; the run is `answered` and keeps its lease, so if this process dies before
-- the hand-on another takes the run and hands on this answer, never asking the model again.
WITH checkpoint AS (
    SELECT seal_checkpoint(%(run_id)s, %(attempt)s, %(step)s, %(state)s, %(seal)s, %(key_id)s, %(prev_seal)s,
                           %(losses)s, %(state_format)s::smallint, %(seal_format)s::smallint) AS run_id
), finished AS (
    SELECT land_finished(checkpoint.run_id, %(attempt)s, %(finished)s) FROM checkpoint
), run AS (
    UPDATE runs SET status = 'answered', answer = %(answer)s FROM checkpoint WHERE runs.id = checkpoint.run_id
), kept AS (
    INSERT INTO answers (run_id, answer, seal, key_id, kept_until)
    SELECT checkpoint.run_id, %(answer)s, %(answer_seal)s, %(answer_key_id)s,
           now() + make_interval(secs => %(answer_ttl)s)
      FROM checkpoint
    ON CONFLICT (run_id) DO NOTHING
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT checkpoint.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM checkpoint
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.answered', checkpoint.run_id, %(actor)s, %(audit)s FROM checkpoint
)
SELECT checkpoint.run_id FROM checkpoint, finished

-- name: kept_answer
SELECT answer, seal, key_id, kept_until, handed_on_at FROM answers WHERE run_id = %(run_id)s

-- name: hand_on
-- I12: the kept answer was handed on: the run succeeds with it, its lease is released. Fenced by the
-- attempt and by the run not having ended, so the answer is handed on by one attempt, once. The
-- checkpoint row is locked too (I3): a take leaves an `answered` run's row alone, so only the lock on
-- the row that carries the attempt waits for a takeover committing meanwhile, and then sees it.
WITH fence AS (
    SELECT c.run_id FROM checkpoints c JOIN runs r ON r.id = c.run_id
     WHERE c.run_id = %(run_id)s AND c.attempt = %(attempt)s AND r.status IN ('answered', 'running')
       FOR UPDATE OF r FOR SHARE OF c
), run AS (
    UPDATE runs SET status = 'succeeded', answer = %(answer)s, finished_at = now()
      FROM fence WHERE runs.id = fence.run_id
), kept AS (
    UPDATE answers SET handed_on_at = now() FROM fence WHERE answers.run_id = fence.run_id
), lease AS (
    DELETE FROM leases USING fence WHERE leases.name = 'checkpoint:' || fence.run_id::text
), attempt_ended AS (
    UPDATE run_attempts a SET ended_at = now(), ended = 'finished', first_at = coalesce(a.first_at, now())
      FROM fence
     WHERE a.run_id = fence.run_id AND a.attempt = %(attempt)s
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT fence.run_id, 'entries', jsonb_build_object('entries', %(entries)s::jsonb) FROM fence
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.succeeded', fence.run_id, %(actor)s, %(audit)s FROM fence
), withdrawn AS (
    -- As `end`: no request of an ended run stays pending (the model answers only once every call of its
    -- steps was made or refused, so there is none here unless a row was written otherwise).
    UPDATE approvals a
       SET status = 'withdrawn', decided_at = now(), reason = 'its run ended (succeeded)'
      FROM fence
     WHERE a.run_id = fence.run_id AND a.status = 'pending'
    RETURNING a.id, a.run_id, a.step, a.idx, a.tool, a.binding, a.reason
), withdrawn_notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT w.run_id, 'approval', jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'status', 'withdrawn',
                                                    'reason', w.reason)
      FROM withdrawn w
), withdrawn_audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.withdrawn', w.run_id, %(actor)s,
           jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'step', w.step, 'idx', w.idx,
                              'binding', w.binding, 'reason', w.reason)
      FROM withdrawn w
)
SELECT fence.run_id FROM fence

-- name: fail
-- The run fails without a new checkpoint: its checkpoint could not be trusted, its owner may not run
-- it, or a statement of it was refused for good. Fenced like every other (I3): a process can fail
-- only the run it drives under its own attempt.
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR UPDATE
), run AS (
    UPDATE runs SET status = 'failed', error = %(error)s, finished_at = now()
      FROM fence
     WHERE runs.id = fence.run_id AND runs.status NOT IN ('succeeded', 'failed', 'interrupted', 'stopped')
    RETURNING id
), lease AS (
    DELETE FROM leases USING run WHERE leases.name = 'checkpoint:' || run.id::text
), attempt_ended AS (
    UPDATE run_attempts a SET ended_at = now(), ended = 'finished', first_at = coalesce(a.first_at, now())
      FROM run
     WHERE a.run_id = run.id AND a.attempt = %(attempt)s
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT run.id, 'error', jsonb_build_object('reason', %(error)s::text) FROM run
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT %(action)s, run.id, %(actor)s, %(audit)s FROM run
), withdrawn AS (
    -- As `end`: the requests the failed run still waited on are taken back (issue 32).
    UPDATE approvals a
       SET status = 'withdrawn', decided_at = now(), reason = 'its run ended (failed): ' || %(error)s::text
      FROM run
     WHERE a.run_id = run.id AND a.status = 'pending'
    RETURNING a.id, a.run_id, a.step, a.idx, a.tool, a.binding, a.reason
), withdrawn_notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT w.run_id, 'approval', jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'status', 'withdrawn',
                                                    'reason', w.reason)
      FROM withdrawn w
), withdrawn_audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.withdrawn', w.run_id, %(actor)s,
           jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'step', w.step, 'idx', w.idx,
                              'binding', w.binding, 'reason', w.reason)
      FROM withdrawn w
)
SELECT fence.run_id FROM fence

-- name: request_stop
WITH run AS (
    UPDATE runs SET stop_requested_at = coalesce(stop_requested_at, now()), stopped_by = coalesce(stopped_by, %(by)s)
     WHERE id = %(run_id)s
    RETURNING id, status, agent, channel
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.stop_requested', run.id, %(by)s, '{}'::jsonb FROM run
)
SELECT id, status, agent, channel FROM run

-- name: hold
-- An operator holds the run (issue 34): no retention pass purges it. Holding it again keeps the first hold's
-- time and holder but takes the newer reason; audited each time.
WITH run AS (
    UPDATE runs SET held_at = coalesce(held_at, now()), held_by = coalesce(held_by, %(by)s),
                    hold_reason = coalesce(%(reason)s, hold_reason)
     WHERE id = %(run_id)s
    RETURNING id, held_at, held_by, hold_reason
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.held', run.id, %(by)s, jsonb_build_object('reason', %(reason)s::text) FROM run
)
SELECT id, held_at, held_by, hold_reason FROM run

-- name: release
-- The hold released: the run is purged by the next pass its policy makes it due for. Audited with the hold
-- it ends (who held it, since when, why).
WITH before AS (
    SELECT id, held_at, held_by, hold_reason FROM runs WHERE id = %(run_id)s FOR UPDATE
), run AS (
    UPDATE runs r SET held_at = NULL, held_by = NULL, hold_reason = NULL
      FROM before b WHERE r.id = b.id
    RETURNING r.id
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.released', b.id, %(by)s,
           jsonb_build_object('reason', %(reason)s::text, 'held_by', b.held_by, 'held_at', b.held_at,
                              'hold_reason', b.hold_reason)
      FROM before b WHERE b.held_at IS NOT NULL
)
SELECT b.id, b.held_at IS NOT NULL AS was_held FROM before b

-- name: lock
-- The first statement of a suspend: the run's row is locked and the attempt checked, so the suspend
-- that follows sees every decision made so far. FOR UPDATE, because a decision's note and audit rows
-- reference the run and so take FOR KEY SHARE on its row, which only FOR UPDATE blocks: a decision
-- coming while the suspend reads its requests commits after the wait, and its wake-up finds it (I15).
SELECT r.id FROM runs r JOIN checkpoints c ON c.run_id = r.id
 WHERE r.id = %(run_id)s AND c.attempt = %(attempt)s
   FOR UPDATE OF r

-- name: suspend
-- I15: the run waits for a person only while one of its requests is still pending. The checkpoint and
-- what the step produced land either way; when every request was decided meanwhile the run stays
-- running under this attempt and goes on (`suspended` false).
WITH checkpoint AS (
    SELECT seal_checkpoint(%(run_id)s, %(attempt)s, %(step)s, %(state)s, %(seal)s, %(key_id)s, %(prev_seal)s,
                           %(losses)s, %(state_format)s::smallint, %(seal_format)s::smallint) AS run_id
), finished AS (
    SELECT land_finished(checkpoint.run_id, %(attempt)s, %(finished)s) FROM checkpoint
), asked AS (
    -- A question the model asked is filed here, with the wait: no input can come before the run waits.
    INSERT INTO inputs (id, run_id, step, idx, question)
    SELECT (a ->> 'id')::uuid, checkpoint.run_id, %(step)s, (a ->> 'idx')::int, a ->> 'question'
      FROM checkpoint, jsonb_array_elements(%(asks)s::jsonb) a
    ON CONFLICT (run_id, step, idx) DO NOTHING
), pending AS (
    -- Rows this statement inserts are not visible to it: an ask not yet answered counts as pending.
    SELECT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = %(run_id)s AND a.status = 'pending')
        OR EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = %(run_id)s AND i.status = 'pending')
        OR EXISTS (SELECT 1 FROM jsonb_array_elements(%(asks)s::jsonb) a
                    WHERE NOT EXISTS (SELECT 1 FROM inputs i
                                       WHERE i.run_id = %(run_id)s AND i.step = %(step)s
                                         AND i.idx = (a ->> 'idx')::int AND i.status = 'given')) AS any
), run AS (
    UPDATE runs SET status = 'waiting'
      FROM checkpoint, pending
     WHERE runs.id = checkpoint.run_id AND pending.any
    RETURNING runs.id
), lease AS (
    DELETE FROM leases USING run WHERE leases.name = 'checkpoint:' || run.id::text
), attempt_ended AS (
    UPDATE run_attempts a SET ended_at = now(), ended = 'waiting', first_at = coalesce(a.first_at, now())
      FROM run
     WHERE a.run_id = run.id AND a.attempt = %(attempt)s
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT checkpoint.run_id, 'entries', jsonb_build_object(
               'entries', %(entries)s::jsonb || CASE WHEN pending.any THEN %(waiting)s::jsonb ELSE '[]' END)
      FROM checkpoint, pending
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.waiting', run.id, %(actor)s, %(audit)s FROM run
)
SELECT checkpoint.run_id, pending.any AS suspended FROM checkpoint, pending, finished

-- name: gate_facts
-- Everything the gates need for one run, in one read: with its starter's authority (migration 032), and
-- whether a restore found it unfinished (migration 037, I24).
SELECT r.agent, r.tenant, r.owner, r.channel, r.may_wait, r.stopped_by, r.restored_at, r.restored_from, g.*, s.*
  FROM runs r, LATERAL gate_context(r.agent, r.tenant, r.owner, r.channel) g, LATERAL starter_authority(r.created_by) s
 WHERE r.id = %(run_id)s

-- name: stop_idle
-- A Stop on a run no process drives (queued or waiting for approval) ends it at once, `stopped`, and
-- takes back the requests it waited on (issue 32): none stays in the queue, and deciding one answers
-- 409 with this reason. A decision landing meanwhile is ordered by the run's row (approvals.decide).
WITH run AS (
    UPDATE runs SET status = 'stopped', error = 'stopped by ' || %(by)s, finished_at = now()
     WHERE id = %(run_id)s AND status IN ('queued', 'waiting')
    RETURNING id
), notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT run.id, 'error', jsonb_build_object('reason', 'stopped by ' || %(by)s) FROM run
), withdrawn AS (
    UPDATE approvals a
       SET status = 'withdrawn', decided_at = now(), reason = 'its run ended (stopped): stopped by ' || %(by)s::text
      FROM run
     WHERE a.run_id = run.id AND a.status = 'pending'
    RETURNING a.id, a.run_id, a.step, a.idx, a.tool, a.binding, a.reason
), withdrawn_notes AS (
    INSERT INTO transcripts (run_id, kind, body)
    SELECT w.run_id, 'approval', jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'status', 'withdrawn',
                                                    'reason', w.reason)
      FROM withdrawn w
), withdrawn_audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'approval.withdrawn', w.run_id, %(by)s,
           jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'step', w.step, 'idx', w.idx,
                              'binding', w.binding, 'reason', w.reason)
      FROM withdrawn w
)
SELECT id FROM run

-- name: ping
SELECT 1 AS ok

-- name: audit
-- An audit row about a run, fenced like every statement a process makes about it (I3).
WITH fence AS (
    SELECT run_id FROM checkpoints WHERE run_id = %(run_id)s AND attempt = %(attempt)s FOR SHARE
), opened AS (
    -- An attempt's first statement may be its audit (a takeover at step 0): when the run went on.
    UPDATE run_attempts a SET first_at = now()
      FROM fence
     WHERE a.run_id = fence.run_id AND a.attempt = %(attempt)s AND a.first_at IS NULL
)
INSERT INTO audit_log (action, run_id, actor, detail)
SELECT %(action)s, fence.run_id, %(actor)s, %(detail)s FROM fence
RETURNING id

-- name: write_checkpoint_only
-- I1 for a step that has nothing to flush: the sealed checkpoint alone, fenced (I3).
UPDATE checkpoints
   SET step = %(step)s, state = %(state)s, seal = %(seal)s, key_id = %(key_id)s, prev_seal = %(prev_seal)s,
           sealed_attempt = %(attempt)s, sealed_losses = %(losses)s, seal_format = %(seal_format)s,
       state_format = %(state_format)s, written_at = now()
 WHERE run_id = %(run_id)s AND attempt = %(attempt)s

-- name: unflushed
-- Transcript entries still waiting in the checkpoint, for readers of the transcript.
SELECT coalesce((state::jsonb) -> 'unflushed', '[]'::jsonb) AS entries FROM checkpoints WHERE run_id = %(run_id)s

-- name: rows_after_head
-- I17: rows the run wrote after the checkpoint it holds now: a call or an approval of a later step, or
-- a call written by a later attempt than the one that sealed it. Each attempt seals before it writes
-- anything else, so any such row means the checkpoint was rolled back.
SELECT (SELECT count(*) FROM calls
         WHERE run_id = %(run_id)s AND (step > %(step)s OR attempt > %(sealed_attempt)s))
     + (SELECT count(*) FROM approvals WHERE run_id = %(run_id)s AND step > %(step)s) AS n

-- name: waiting_decided
-- I15: runs left waiting although every request and question they filed was answered (a decision or
-- an input whose wake-up was lost): the sweep takes them. Those whose checkpoint no live process can
-- read are passed by (as claim_lapsed passes them).
SELECT r.id FROM runs r
 WHERE r.status = 'waiting'
   AND (knows_checkpoint(%(holder)s, r.id) OR checkpoint_knower(r.id, %(holder)s) IS NOT NULL)
   AND (EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id) OR EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = r.id))
   AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = r.id AND a.status = 'pending')
   AND NOT EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = r.id AND i.status = 'pending')
 ORDER BY r.created_at
 LIMIT %(limit)s

-- name: input_for
-- The input given to one `request_input` call, if any.
SELECT id, question, status, text, given_by FROM inputs
 WHERE run_id = %(run_id)s AND step = %(step)s AND idx = %(idx)s

-- name: give_input
-- I18: an input for the question it names (`question_id`), else for the oldest question the run asked
-- that is still pending; `answered_by` names the request giving it (questions.py), unique per run. A
-- request that answered a question of the run before finds that question again (it sorts first) and
-- changes nothing, however late it comes: it can never answer another question. Of two sends of one
-- request at once, the second waits on the question's row lock and, its WHERE re-checked against the
-- row the first committed (READ COMMITTED), finds the question answered by itself. Only a pending
-- question of a waiting run takes an input. Returns the question as found, and whether it was given.
WITH asked AS (
    SELECT i.id, i.question, i.status, i.text, i.answered_by, r.status AS run_status
      FROM inputs i JOIN runs r ON r.id = i.run_id
     WHERE i.run_id = %(run_id)s
       AND CASE WHEN %(question_id)s::uuid IS NULL
                THEN i.answered_by = %(answered_by)s OR i.status = 'pending'
                ELSE i.id = %(question_id)s::uuid END
     ORDER BY i.answered_by IS NOT DISTINCT FROM %(answered_by)s DESC, i.step, i.idx
     LIMIT 1
       FOR UPDATE OF i
), given AS (
    UPDATE inputs SET status = 'given', text = %(text)s, given_by = %(by)s, given_at = now(),
                      answered_by = %(answered_by)s
      FROM asked
     WHERE inputs.id = asked.id AND inputs.status = 'pending' AND asked.status = 'pending'
       AND asked.run_status = 'waiting'
    RETURNING inputs.id, inputs.run_id
), audit AS (
    INSERT INTO audit_log (action, run_id, actor, detail)
    SELECT 'agent.run.input_given', given.run_id, %(by)s, jsonb_build_object('input_id', given.id) FROM given
)
SELECT asked.id, asked.question, asked.status, asked.text, asked.answered_by, asked.run_status,
       given.id IS NOT NULL AS given
  FROM asked LEFT JOIN given ON given.id = asked.id

-- name: waiting_for
-- What a waiting run waits for: its pending questions (each with its id, which an input names), then its
-- pending approvals, each in the order the run asked; with when each was asked (`run_list.oldest_first`).
SELECT kind, question, question_id, approval_id, tool, asked_at, step, idx FROM (
    SELECT 1 AS part, step, idx, 'input' AS kind, question, id AS question_id, NULL::uuid AS approval_id,
           NULL::text AS tool, asked_at
      FROM inputs WHERE run_id = %(run_id)s AND status = 'pending'
    UNION ALL
    -- A restored run's write held for an operator (I24) says why it is asked.
    SELECT 2, step, idx, 'approval', coalesce(asked_why, 'approve ' || tool || '?'), NULL::uuid, id, tool, created_at
      FROM approvals WHERE run_id = %(run_id)s AND status = 'pending'
) waits
 ORDER BY part, step, idx
