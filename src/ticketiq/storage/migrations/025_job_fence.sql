-- beside: previous
-- The job fence, written once (issue 17). Every statement a running job makes about itself holds only
-- while the job's row is still the one its attempt claimed: its id, its attempt, and still running (I3).
-- A sweep that interrupts or queues the job again, a hand-back, or another worker's claim (which
-- raises the attempt) each make it false, and the statement matches nothing.
--
-- It takes the job's ROW, not its id: the condition reads the columns of the very row version the
-- statement is about to write or lock. A statement that waited on a takeover's row lock re-checks its
-- WHERE against the row the takeover committed, and this sees the new attempt there. (A function that
-- read `jobs` by id would read it from the statement's snapshot, from before the takeover, and hold.)
-- It reads nothing else, so it is IMMUTABLE and the planner inlines it: `jobs.id = $1` still finds
-- the row through the primary key. It locks nothing: a statement that reads its fence before writing
-- something else still takes FOR SHARE or FOR UPDATE on the job's row.
CREATE FUNCTION job_holds(job jobs, job_id uuid, attempt bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT job.id = job_id AND job.attempt = attempt AND job.status = 'running'
$$;
COMMENT ON FUNCTION job_holds(jobs, uuid, bigint) IS
    'The job fence (I3): the job row is the one this attempt claimed and is still running. Every '
    'statement a running job makes about itself is conditioned on it.';
