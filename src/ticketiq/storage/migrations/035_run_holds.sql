-- beside: previous
-- Issue 34: a run may be held, so that no retention pass purges it whatever the policy says (compliance's
-- "keep this run"). An operator sets and releases a hold (POST and DELETE /v1/runs/{id}/hold), audited
-- (`agent.run.held`, `agent.run.released`), with an optional reason; the run and the run list show it.
-- The retention pass purges ended runs by `finished_at`, unheld: the partial index is what it reads.
--
-- The previous release runs beside it: it never reads or writes these columns (its statements name theirs),
-- and it runs no retention pass. A hold set while it serves is kept; it only cannot show it.
ALTER TABLE runs ADD COLUMN held_at timestamptz;
ALTER TABLE runs ADD COLUMN held_by text;
ALTER TABLE runs ADD COLUMN hold_reason text;
COMMENT ON COLUMN runs.held_at IS 'When an operator held the run (issue 34): no retention pass purges a held run. NULL: not held.';
COMMENT ON COLUMN runs.held_by IS 'Who held the run (a token''s name).';
COMMENT ON COLUMN runs.hold_reason IS 'Why, as the operator said (optional).';

CREATE INDEX runs_purgeable ON runs (finished_at) WHERE finished_at IS NOT NULL AND held_at IS NULL;
-- The run list's `held=true`: the held runs, newest first, without reading the rest.
CREATE INDEX runs_held_created ON runs (created_at, id) WHERE held_at IS NOT NULL;
