-- beside: previous
-- Functions that give back at most one row, said so to the planner. Postgres takes a set-returning function
-- to return 1000 rows unless told: the statement that ends a run joins its checkpoint's row (seal_checkpoint)
-- to runs and run_attempts, and planned for 1000 rows it read both tables whole, hashed, for the one row it
-- updates (8-9 ms with 16,000 runs, and more with every run kept). Told 1, it reads each by its key. Only
-- the planner's estimate changes: the previous release runs beside it unchanged.
ALTER FUNCTION seal_checkpoint(uuid, integer, integer, text, text, text, text, integer, smallint, smallint) ROWS 1;
ALTER FUNCTION take_run(uuid, text, float8, boolean, text) ROWS 1;
ALTER FUNCTION gate_context(text, text, text, text) ROWS 1;
ALTER FUNCTION starter_authority(text) ROWS 1;
