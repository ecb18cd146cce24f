-- beside: previous
-- Issue 19: app processes keep the tokens they found (auth/token_cache.py) and drop one when its row
-- changes. A revocation (or any other change, or a delete) notifies `ticketiq_tokens` with the token's
-- name from the changing transaction itself, so it is heard only once committed, by every process.
CREATE FUNCTION notify_tokens() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ticketiq_tokens', OLD.name);
    RETURN NULL;
END
$$;
CREATE TRIGGER api_tokens_changed AFTER UPDATE OR DELETE ON api_tokens
    FOR EACH ROW EXECUTE FUNCTION notify_tokens();
