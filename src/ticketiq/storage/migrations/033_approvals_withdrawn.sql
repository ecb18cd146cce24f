-- beside: previous
-- Issue 32 (finding 7): an approval follows its run. A run that ends (stopped, failed, succeeded) while a
-- call of it waits for a person withdraws that request in the statement that ends it (runs.sql: end,
-- fail, hand_on, stop_idle), audited `approval.withdrawn` with the reason; deciding a withdrawn request
-- answers 409 with that reason (approvals.decide decides only while the run has not ended). This
-- migration adds the status to the check, and withdraws once the requests that runs ended before it left
-- pending, audited alike.
--
-- The previous release runs beside it: this only adds a status value, which that release never writes.
-- Where it reads one: its decision (approvals.decide matches `pending` or its own repeat) matches no
-- withdrawn request and answers 409 "was already withdrawn"; its lists and the console filter by
-- pending, approved or rejected; its takes, sweeps and approval gate (acquire, waiting_decided, a driven
-- run's requests) read the requests of runs that have not ended, and a withdrawn one's run has ended.
-- What it does not do: its statements that end a run do not withdraw, so while it serves beside this
-- release a run it stops or fails leaves its requests pending, as every run did before. This release
-- refuses to decide those (409: its run ended), so no one is told a call goes on that never will; they
-- stay listed as pending until a later migration withdraws them as this one does below.
ALTER TABLE approvals DROP CONSTRAINT approvals_status_check;
ALTER TABLE approvals ADD CONSTRAINT approvals_status_check
    CHECK (status IN ('pending', 'approved', 'rejected', 'withdrawn'));

COMMENT ON COLUMN approvals.status IS 'pending until a person decides (approved, rejected); withdrawn, with the reason, when its run ended first (issue 32).';

WITH withdrawn AS (
    UPDATE approvals a
       SET status = 'withdrawn', decided_at = now(),
           reason = 'its run ended (' || r.status || ')' || coalesce(': ' || r.error, '')
      FROM runs r
     WHERE r.id = a.run_id AND a.status = 'pending' AND r.status IN ('succeeded', 'failed', 'interrupted', 'stopped')
    RETURNING a.id, a.run_id, a.step, a.idx, a.tool, a.binding, a.reason
)
INSERT INTO audit_log (action, run_id, actor, detail)
SELECT 'approval.withdrawn', w.run_id, 'migration 033',
       jsonb_build_object('approval_id', w.id, 'tool', w.tool, 'step', w.step, 'idx', w.idx, 'binding', w.binding,
                          'reason', w.reason)
  FROM withdrawn w;
