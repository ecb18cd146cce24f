-- beside: previous
-- Issue 31: each process records the release it runs (the package's version and the commit it was built
-- from) beside its identity, for GET /v1/processes and the console: during a roll, which processes are
-- replaced and which versions serve side by side. Added columns only: the previous release, which
-- inserts its rows without them, runs beside this migration (they stay NULL: "before 030").
ALTER TABLE processes ADD COLUMN version text, ADD COLUMN build_commit text;
