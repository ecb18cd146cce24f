-- beside: previous
-- I20 "already done" rests on a write (issue 18). With a synchronous standby, a commit is visible on
-- the primary (to other sessions once its wait for the standby is cut short, to everyone after a restart
-- of the primary) before the standby has it, and a failover throws it away. A statement that only reads
-- the row such a commit made (a key found, a run found by its key, a delivery already recorded) commits
-- nothing and waits for nothing: an answer of "done" taken from it can be lost with the row.
--
-- durable() makes the transaction that calls it wait for the standby when it commits. Its commit then
-- lands on the standby after every commit the statement saw (WAL is replayed in order), so what the
-- statement found is there too once the answer comes: the client has the answer only after the commit
-- (psycopg returns a result after ReadyForQuery). A statement calls it where it takes the found-it
-- answer, per row found, so the path that finds nothing (the first insert) pays nothing.
--
-- Why a logical message: a commit waits for the standby only if its transaction has an id AND wrote WAL
-- (RecordTransactionCommit: `wrote_xlog && markXidCommitted`). pg_current_xact_id() alone assigns an id
-- but writes no WAL, so its commit returns at once (measured: 1 ms with the standby stopped). A
-- transactional pg_logical_emit_message does both, with no table to bloat and no row lock to contend on;
-- every role may call it. Its prefix is `ticketiq.durable` and its payload the database's name, so a
-- reader of the WAL (pg_walinspect, tests/integration/test_found_it_waits.py) tells whose it is.
CREATE FUNCTION durable() RETURNS boolean
    LANGUAGE sql VOLATILE
AS $$
SELECT pg_logical_emit_message(true, 'ticketiq.durable', current_database()) IS NOT NULL
$$;
COMMENT ON FUNCTION durable() IS
    'I20: makes the calling transaction''s commit wait for the synchronous standby, so what the statement '
    'found is on the standby once its answer comes. Called per row found on a found-it-already path.';
