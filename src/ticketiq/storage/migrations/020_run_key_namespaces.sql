-- beside: previous
-- I19: every run key in its maker's namespace (issue 15; engine/run_keys.py lists them).
--
-- runs.idempotency_key is one unique column for every maker. Before this migration POST /v1/runs kept
-- the caller's Idempotency-Key as it came, so a caller could send a key another maker makes (a cron
-- fire's `cron:<schedule>:<time>`, another token's `copilot:` or `a2a:` key, a workflow step's key) and
-- so take that maker's run: the fire found the caller's run and the schedule's agent never ran. Every
-- maker's keys now start with its namespace and a tab, which no Idempotency-Key holds. The keys of the
-- runs made before are moved the same way, so a repeat of a request made before the upgrade still finds
-- its run. A key's namespace is its run's channel, never its text: a run made through the API under a
-- `cron:` key moves into the API namespace, and the fire's key is free again.
--
-- Webhook (`webhook<TAB>...`), ticket-event (`ticket_event<TAB>...`) and Teams (`teams§...`) keys were
-- in namespaces of their own already and stay as they are.

-- The API's keys are each token's own: api<TAB><token><TAB><key>. A run from before tokens existed
-- (created_by NULL) gets the empty token name, which no token has: its key is reached by no one.
UPDATE runs SET idempotency_key = concat_ws(E'\t', 'api', coalesce(created_by, ''), idempotency_key)
 WHERE channel = 'api' AND idempotency_key IS NOT NULL;

-- copilot:<token>:<key> and a2a:<token>:<messageId>: a token's name holds no ':', so the first two
-- colons are the separators (the key, or the messageId, may hold more).
UPDATE runs SET idempotency_key = regexp_replace(idempotency_key, '^(copilot|a2a):([^:]*):', E'\\1\t\\2\t')
 WHERE channel IN ('copilot', 'a2a') AND idempotency_key ~ '^(copilot|a2a):[^:]*:'
   AND split_part(idempotency_key, ':', 1) = channel;

-- cron:<schedule id>:<fire time>: the id is a uuid; the time, in ISO 8601, holds colons of its own.
UPDATE runs SET idempotency_key = regexp_replace(idempotency_key, '^cron:([^:]*):', E'cron\t\\1\t')
 WHERE channel = 'cron' AND idempotency_key ~ '^cron:[^:]*:';

-- A workflow agent step's run was made under the bare step key (I11's `tw...`).
UPDATE runs SET idempotency_key = 'workflow' || E'\t' || idempotency_key
 WHERE channel = 'workflow' AND idempotency_key IS NOT NULL;

COMMENT ON COLUMN runs.idempotency_key IS
    'The key the run was made under, in its maker''s namespace (engine/run_keys.py): `api<TAB><token><TAB><key>` '
    'for POST /v1/runs, and a namespace of its own for each entry point. A maker that finds a run under its '
    'key checks it made that run before it takes it as its own.';

-- A fire whose key a run made through the API held found that run and linked it: the schedule's agent
-- never ran for that time, and no outcome was recorded. Such a fire is failed, with the reason, and no
-- longer names the caller's run as its own.
UPDATE schedule_fires f
   SET run_id = NULL,
       reason = format('the fire made no run: run %s, made on the %s channel by %s, held its key (found by migration '
                       '020); the schedule''s agent did not run for this time', r.id, r.channel,
                       coalesce(r.created_by, 'an unknown token'))
  FROM runs r
 WHERE r.id = f.run_id AND r.channel <> 'cron';

UPDATE schedule_fires SET run_key = regexp_replace(run_key, '^cron:([^:]*):', E'cron\t\\1\t')
 WHERE run_key ~ '^cron:[^:]*:';

COMMENT ON COLUMN schedule_fires.run_key IS
    'The idempotency key of the fire''s run, cron<TAB><schedule id><TAB><fire time, UTC ISO 8601>: two leaders '
    'make one run. A run under it that the fire did not make is refused, and the fire failed with the reason.';

-- An inspector write is started once per key. A request with an Idempotency-Key sends its call under a
-- key derived from it: a retry after a crash finds the start on record (its insert conflicts, which
-- waits for the first one's commit, I20) and never sends the write again.
CREATE UNIQUE INDEX audit_log_inspector_started ON audit_log ((detail ->> 'key'))
 WHERE action = 'inspector.call.started';
-- Where such a retry looks for the outcome the first try recorded.
CREATE INDEX audit_log_inspector_outcome ON audit_log ((detail ->> 'key')) WHERE action = 'inspector.call';
