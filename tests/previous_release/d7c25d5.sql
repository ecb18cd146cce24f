-- Written by tests/previous_release/make_fixture.py from commit d7c25d5: what that release's
-- own processes wrote, each killed mid-run. Do not edit: run the script again.
--
-- PostgreSQL database dump
--


-- Dumped from database version 18.6
-- Dumped by pg_dump version 18.6

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET transaction_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: standin; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA standin;


--
-- Name: a2a_task_state(uuid, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.a2a_task_state(p_run_id uuid, p_status text, p_error text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
    SELECT CASE
        WHEN p_status = 'queued' THEN 'TASK_STATE_SUBMITTED'
        WHEN p_status IN ('running', 'answered') THEN 'TASK_STATE_WORKING'
        WHEN p_status = 'waiting' THEN
            CASE WHEN EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = p_run_id AND i.status = 'pending')
                   OR EXISTS (SELECT 1 FROM approvals a WHERE a.run_id = p_run_id AND a.status = 'pending')
                 THEN 'TASK_STATE_INPUT_REQUIRED'
                 ELSE 'TASK_STATE_WORKING'
            END
        WHEN p_status = 'succeeded' THEN 'TASK_STATE_COMPLETED'
        WHEN p_status = 'stopped' THEN 'TASK_STATE_CANCELED'
        WHEN p_status = 'failed' AND starts_with(coalesce(p_error, ''), 'stopped by') THEN 'TASK_STATE_CANCELED'
        WHEN p_status IN ('failed', 'interrupted') THEN 'TASK_STATE_FAILED'
        ELSE 'TASK_STATE_UNSPECIFIED'
    END
$$;


--
-- Name: durable(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.durable() RETURNS boolean
    LANGUAGE sql
    AS $$
SELECT pg_logical_emit_message(true, 'ticketiq.durable', current_database()) IS NOT NULL
$$;


--
-- Name: gate_context(text, text, text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.gate_context(p_agent text, p_tenant text, p_owner text, p_channel text) RETURNS TABLE(agent_quarantine text, tenant_quarantine text, channel_enabled boolean, owner_may_run boolean, granted text[], needs_approval text[])
    LANGUAGE sql STABLE
    AS $$
    SELECT (SELECT q.reason FROM quarantines q WHERE q.kind = 'agent' AND q.name = p_agent),
           (SELECT q.reason FROM quarantines q WHERE q.kind = 'tenant' AND q.name = p_tenant),
           coalesce((SELECT ch.enabled FROM channels ch WHERE ch.name = p_channel), true),
           coalesce((SELECT p.may_run FROM principals p WHERE p.name = p_owner), false),
           coalesce((SELECT array_agg(g.tool) FROM grants g WHERE g.principal = p_owner AND NOT g.revoked), '{}'),
           coalesce((SELECT array_agg(t.tool) FROM tool_policies t WHERE t.needs_approval), '{}')
$$;


--
-- Name: give_runs(text[], text, double precision, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.give_runs(p_names text[], p_claimer text, p_ttl double precision, p_why text) RETURNS TABLE(run_id uuid, attempt integer, step integer, losses integer, state text, seal text, key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer, seal_format smallint, lease_expired_at timestamp with time zone, why text, holder text)
    LANGUAGE sql
    AS $$
    WITH picked AS (
        SELECT name, row_number() OVER (ORDER BY name) AS slot FROM unnest(p_names) AS name
    ), targets AS (
        -- Only when there is something to give: the look for targets costs more than the claim of nothing.
        SELECT t.slot, t.holder
          FROM (SELECT count(*)::int AS n FROM picked) c, LATERAL run_targets(p_claimer, c.n) t
         WHERE c.n > 0
    )
    SELECT t.*, p_why, targets.holder
      FROM picked JOIN targets USING (slot),
           LATERAL take_run(substr(picked.name, 12)::uuid, targets.holder, p_ttl, true,
                            CASE WHEN targets.holder <> p_claimer THEN p_why END) t
$$;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: jobs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.jobs (
    id uuid NOT NULL,
    kind text NOT NULL,
    params jsonb DEFAULT '{}'::jsonb NOT NULL,
    status text DEFAULT 'queued'::text NOT NULL,
    resumable boolean NOT NULL,
    attempt integer DEFAULT 0 NOT NULL,
    losses integer DEFAULT 0 NOT NULL,
    state jsonb DEFAULT '{}'::jsonb NOT NULL,
    progress_done bigint DEFAULT 0 NOT NULL,
    progress_total bigint,
    result jsonb,
    error text,
    holder text,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    cancel_requested_by text,
    restarted_from uuid,
    CONSTRAINT jobs_attempt_check CHECK ((attempt >= 0)),
    CONSTRAINT jobs_finished CHECK (((status = ANY (ARRAY['succeeded'::text, 'failed'::text, 'cancelled'::text, 'interrupted'::text])) = (finished_at IS NOT NULL))),
    CONSTRAINT jobs_losses_check CHECK ((losses >= 0)),
    CONSTRAINT jobs_running_held CHECK (((status <> 'running'::text) OR (holder IS NOT NULL))),
    CONSTRAINT jobs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'succeeded'::text, 'failed'::text, 'cancelled'::text, 'interrupted'::text])))
);


--
-- Name: job_holds(public.jobs, uuid, bigint); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.job_holds(job public.jobs, job_id uuid, attempt bigint) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
SELECT job.id = job_id AND job.attempt = attempt AND job.status = 'running'
$$;


--
-- Name: land_finished(uuid, integer, jsonb); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.land_finished(p_run_id uuid, p_attempt integer, p_finished jsonb) RETURNS integer
    LANGUAGE sql
    AS $$
    WITH landed AS (
        INSERT INTO calls (run_id, step, idx, attempt, provider_call_id, tool, class, step_key, args, gate,
                           status, outcome, settlement, sent_at, outcome_at)
        SELECT p_run_id, f.step, f.idx, p_attempt, f.id, f.tool, f.class, f.step_key, f.args, f.gate,
               'done', f.outcome, f.how, to_timestamp(f.sent_at), to_timestamp(f.outcome_at)
          FROM jsonb_to_recordset(p_finished) AS f (step int, idx int, id text, tool text, class text,
                                                    step_key text, args jsonb, gate text, outcome jsonb, how text,
                                                    sent_at float8, outcome_at float8)
        ON CONFLICT (run_id, step, idx) DO NOTHING
        RETURNING 1
    )
    SELECT count(*)::int FROM landed
$$;


--
-- Name: leases_taken_lapsed(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.leases_taken_lapsed() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE processes p SET stalled_at = now()
     WHERE p.id = OLD.holder AND p.ended_at IS NULL AND p.stalled_at IS NULL AND process_alive(p.id)
       AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.holder = OLD.holder AND l.expires_at >= now());
    RETURN NULL;
END $$;


--
-- Name: notify_gates(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notify_gates() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('ticketiq_gates', TG_TABLE_NAME);
    RETURN NULL;
END
$$;


--
-- Name: notify_tokens(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.notify_tokens() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('ticketiq_tokens', OLD.name);
    RETURN NULL;
END
$$;


--
-- Name: process_alive(text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.process_alive(process_id text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
    SELECT EXISTS (
        SELECT 1
          FROM processes p
          JOIN pg_locks l ON l.locktype = 'advisory' AND l.classid = 7117::oid
                         AND l.objid = p.lock_key::oid AND l.objsubid = 2 AND l.granted
                         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
         WHERE p.id = process_id AND p.ended_at IS NULL
    )
$$;


--
-- Name: run_targets(text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.run_targets(p_claimer text, p_n integer) RETURNS TABLE(slot bigint, holder text)
    LANGUAGE sql STABLE
    AS $$
    WITH live AS (
        SELECT p_claimer AS id
         UNION
        SELECT p.id FROM processes p
         WHERE p_n > 0 AND p.ended_at IS NULL AND p.draining_at IS NULL AND process_alive(p.id)
           AND NOT EXISTS (SELECT 1 FROM leases l
                            WHERE l.holder = p.id AND l.expires_at < now() AND l.name LIKE 'checkpoint:%')
    ), load AS (
        SELECT live.id, (SELECT count(*) FROM leases l WHERE l.holder = live.id AND l.name LIKE 'checkpoint:%') AS held,
               (SELECT p.started_at FROM processes p WHERE p.id = live.id) AS started_at
          FROM live
    ), slots AS (
        SELECT load.id, load.started_at, load.held + k AS level FROM load, generate_series(0, p_n - 1) AS k
    )
    SELECT row_number() OVER (ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id), id
      FROM slots
     ORDER BY level, id = p_claimer, started_at DESC NULLS LAST, id
     LIMIT greatest(p_n, 0)
$$;


--
-- Name: run_text(text, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.run_text(p_input text, p_answer text) RETURNS tsvector
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
    SELECT to_tsvector('simple'::regconfig, left(p_input, 20000) || ' ' || left(coalesce(p_answer, ''), 20000))
$$;


--
-- Name: runs_notify(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.runs_notify() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('ticketiq_runs', NEW.id::text);
    RETURN NULL;
END $$;


--
-- Name: runs_touch(); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.runs_touch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END $$;


--
-- Name: seal_checkpoint(uuid, integer, integer, text, text, text, text, integer); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.seal_checkpoint(p_run_id uuid, p_attempt integer, p_step integer, p_state text, p_seal text, p_key_id text, p_prev_seal text, p_losses integer) RETURNS SETOF uuid
    LANGUAGE sql
    AS $$
    UPDATE checkpoints
       SET step = p_step, state = p_state, seal = p_seal, key_id = p_key_id, prev_seal = p_prev_seal,
           sealed_attempt = p_attempt, sealed_losses = p_losses, seal_format = 2, written_at = now()
     WHERE run_id = p_run_id AND attempt = p_attempt
    RETURNING run_id
$$;


--
-- Name: take_run(uuid, text, double precision, boolean, text); Type: FUNCTION; Schema: public; Owner: -
--

CREATE FUNCTION public.take_run(p_run_id uuid, p_holder text, p_ttl double precision, p_loss boolean, p_handed text DEFAULT NULL::text) RETURNS TABLE(run_id uuid, attempt integer, step integer, losses integer, state text, seal text, key_id text, prev_seal text, sealed_attempt integer, sealed_losses integer, seal_format smallint, lease_expired_at timestamp with time zone)
    LANGUAGE plpgsql
    AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH prior AS (
        -- The snapshot's row: the expiry the last holder renewed it to, and that holder. The caller holds
        -- its lock.
        SELECT l.expires_at, l.holder FROM leases l WHERE l.name = 'checkpoint:' || p_run_id::text
    ), lease AS (
        INSERT INTO leases (name, holder, expires_at)
        VALUES ('checkpoint:' || p_run_id::text, p_holder, now() + make_interval(secs => p_ttl))
        ON CONFLICT (name) DO UPDATE
           SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at, acquired_at = now(),
               handed_why = NULL, handed_attempt = NULL
        RETURNING leases.name
    ), taken AS (
        UPDATE checkpoints c
           SET attempt = c.attempt + 1, losses = c.losses + CASE WHEN p_loss THEN 1 ELSE 0 END
          FROM lease
         WHERE c.run_id = p_run_id
        RETURNING c.run_id, c.attempt, c.step, c.losses, c.state, c.seal, c.key_id, c.prev_seal,
                  c.sealed_attempt, c.sealed_losses, c.seal_format
    ), running AS (
        UPDATE runs r SET status = 'running', started_at = coalesce(r.started_at, now())
          FROM taken
         -- I12: a run taken while it hands on its kept answer stays `answered`: the purge spares
          -- that answer until it is handed on, and the new attempt hands it on instead of asking again.
         WHERE r.id = taken.run_id AND r.status NOT IN ('running', 'answered')
    ), closed AS (
        -- The attempt this take ends, when nothing closed it: a loss found now (the lease's last holder
        -- is gone, or lives but let the lease lapse: stalled), or a take that counts no loss (handed back).
        UPDATE run_attempts a
           SET ended_at = now(),
               ended = CASE WHEN NOT p_loss THEN 'handed_back'
                            WHEN process_alive((SELECT prior.holder FROM prior)) THEN 'stalled' ELSE 'lost' END
          FROM taken
         WHERE a.run_id = taken.run_id AND a.attempt = taken.attempt - 1 AND a.ended IS NULL
    ), opened AS (
        INSERT INTO run_attempts (run_id, attempt, process, lost_detected_at)
        SELECT taken.run_id, taken.attempt, p_holder, CASE WHEN p_loss THEN now() END FROM taken
        ON CONFLICT ON CONSTRAINT run_attempts_pkey DO NOTHING
    )
    SELECT t.run_id, t.attempt, t.step, t.losses, t.state, t.seal, t.key_id, t.prev_seal, t.sealed_attempt,
           t.sealed_losses, t.seal_format, (SELECT prior.expires_at FROM prior)
      FROM taken t;
    IF FOUND AND p_handed IS NOT NULL THEN
        -- A statement of its own: it sees the attempt the take just raised.
        UPDATE leases l SET handed_why = p_handed, handed_attempt = c.attempt
          FROM checkpoints c
         WHERE l.name = 'checkpoint:' || p_run_id::text AND c.run_id = p_run_id;
        PERFORM pg_notify('ticketiq_handed', p_holder);
    END IF;
END
$$;


--
-- Name: checkpoints; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.checkpoints (
    run_id uuid NOT NULL,
    attempt integer NOT NULL,
    step integer DEFAULT 0 NOT NULL,
    losses integer DEFAULT 0 NOT NULL,
    state text NOT NULL,
    seal text NOT NULL,
    key_id text NOT NULL,
    written_at timestamp with time zone DEFAULT now() NOT NULL,
    prev_seal text,
    sealed_attempt integer NOT NULL,
    sealed_losses integer NOT NULL,
    seal_format smallint DEFAULT 2 NOT NULL
);
ALTER TABLE ONLY public.checkpoints ALTER COLUMN state SET STORAGE EXTERNAL;


--
-- Name: runs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.runs (
    id uuid NOT NULL,
    agent text NOT NULL,
    input text NOT NULL,
    owner text NOT NULL,
    tenant text NOT NULL,
    channel text NOT NULL,
    may_wait boolean NOT NULL,
    correlation_id text NOT NULL,
    parent_run_id uuid,
    delegation_key text,
    status text DEFAULT 'queued'::text NOT NULL,
    answer text,
    error text,
    idempotency_key text,
    request_hash text,
    stop_requested_at timestamp with time zone,
    stopped_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    created_by text,
    updated_at timestamp with time zone DEFAULT now(),
    search tsvector GENERATED ALWAYS AS (public.run_text(input, answer)) STORED,
    CONSTRAINT runs_status_check CHECK ((status = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'answered'::text, 'succeeded'::text, 'failed'::text, 'interrupted'::text, 'stopped'::text])))
);
ALTER TABLE ONLY public.runs ALTER COLUMN search SET STATISTICS 1000;


--
-- Name: a2a_run_states; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.a2a_run_states AS
 SELECT r.id AS run_id,
    r.created_by,
    r.answer,
    r.error,
    public.a2a_task_state(r.id, r.status, r.error) AS state,
    COALESCE(r.finished_at, GREATEST(r.created_at, r.started_at, c.written_at)) AS changed_at
   FROM (public.runs r
     LEFT JOIN public.checkpoints c ON ((c.run_id = r.id)));


--
-- Name: a2a_tasks; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.a2a_tasks (
    run_id uuid NOT NULL,
    context_id text NOT NULL,
    history jsonb DEFAULT '[]'::jsonb NOT NULL,
    metadata jsonb DEFAULT '{}'::jsonb NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT a2a_tasks_history_check CHECK ((jsonb_typeof(history) = 'array'::text)),
    CONSTRAINT a2a_tasks_metadata_check CHECK ((jsonb_typeof(metadata) = 'object'::text))
);


--
-- Name: a2a_task_rows; Type: VIEW; Schema: public; Owner: -
--

CREATE VIEW public.a2a_task_rows AS
 SELECT t.run_id,
    t.context_id,
    t.history,
    t.metadata,
    t.created_by,
    t.created_at,
    s.answer,
    s.error,
    s.state,
    s.changed_at
   FROM (public.a2a_tasks t
     JOIN public.a2a_run_states s ON ((s.run_id = t.run_id)));


--
-- Name: answers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.answers (
    run_id uuid NOT NULL,
    answer text NOT NULL,
    seal text NOT NULL,
    key_id text NOT NULL,
    kept_until timestamp with time zone NOT NULL,
    written_at timestamp with time zone DEFAULT now() NOT NULL,
    handed_on_at timestamp with time zone
);


--
-- Name: api_tokens; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.api_tokens (
    name text NOT NULL,
    role text NOT NULL,
    agents text[],
    token_hash text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    revoked_at timestamp with time zone,
    CONSTRAINT api_tokens_agents_check CHECK (((agents IS NULL) OR (cardinality(agents) > 0))),
    CONSTRAINT api_tokens_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$'::text)),
    CONSTRAINT api_tokens_role_check CHECK ((role = ANY (ARRAY['caller'::text, 'operator'::text, 'admin'::text]))),
    CONSTRAINT api_tokens_token_hash_check CHECK ((token_hash ~ '^[0-9a-f]{64}$'::text))
);


--
-- Name: approvals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.approvals (
    id uuid NOT NULL,
    run_id uuid NOT NULL,
    step integer NOT NULL,
    idx integer NOT NULL,
    tool text NOT NULL,
    args jsonb NOT NULL,
    step_key text,
    status text DEFAULT 'pending'::text NOT NULL,
    decided_by text,
    reason text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    decided_at timestamp with time zone,
    binding text NOT NULL,
    CONSTRAINT approvals_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'approved'::text, 'rejected'::text])))
);


--
-- Name: audit_log; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.audit_log (
    id bigint NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    action text NOT NULL,
    run_id uuid,
    actor text NOT NULL,
    detail jsonb DEFAULT '{}'::jsonb NOT NULL
);


--
-- Name: audit_log_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.audit_log_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: audit_log_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.audit_log_id_seq OWNED BY public.audit_log.id;


--
-- Name: calls; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.calls (
    run_id uuid NOT NULL,
    step integer NOT NULL,
    idx integer NOT NULL,
    attempt integer NOT NULL,
    provider_call_id text NOT NULL,
    tool text NOT NULL,
    class text NOT NULL,
    step_key text,
    sent_key text,
    args jsonb NOT NULL,
    gate text,
    status text DEFAULT 'pending'::text NOT NULL,
    outcome jsonb,
    settlement text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    in_flight_until timestamp with time zone,
    remote_ref text,
    marked_at timestamp with time zone,
    sent_at timestamp with time zone,
    outcome_at timestamp with time zone,
    CONSTRAINT calls_class_check CHECK ((class = ANY (ARRAY['read'::text, 'write'::text, 'keyed_write'::text, 'delegation'::text, 'remote_agent'::text, 'subagent'::text]))),
    CONSTRAINT calls_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'in_doubt'::text, 'done'::text, 'settled'::text])))
);


--
-- Name: channels; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.channels (
    name text NOT NULL,
    enabled boolean NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: classifiers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.classifiers (
    id uuid NOT NULL,
    job_id uuid NOT NULL,
    project text,
    classes text[] NOT NULL,
    rows_trained integer NOT NULL,
    rows_held_out integer NOT NULL,
    accuracy double precision,
    epochs integer NOT NULL,
    model jsonb NOT NULL,
    trained_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT classifiers_accuracy_check CHECK (((accuracy >= (0)::double precision) AND (accuracy <= (1)::double precision))),
    CONSTRAINT classifiers_check CHECK (((accuracy IS NULL) = (rows_held_out = 0))),
    CONSTRAINT classifiers_classes_check CHECK ((cardinality(classes) >= 2)),
    CONSTRAINT classifiers_epochs_check CHECK ((epochs > 0)),
    CONSTRAINT classifiers_rows_held_out_check CHECK ((rows_held_out >= 0)),
    CONSTRAINT classifiers_rows_trained_check CHECK ((rows_trained > 0))
);


--
-- Name: console_sessions; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.console_sessions (
    id_hash text NOT NULL,
    token_name text NOT NULL,
    csrf_secret text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    CONSTRAINT console_sessions_check CHECK ((expires_at > created_at)),
    CONSTRAINT console_sessions_csrf_secret_check CHECK ((length(csrf_secret) >= 32)),
    CONSTRAINT console_sessions_id_hash_check CHECK ((id_hash ~ '^[0-9a-f]{64}$'::text))
);


--
-- Name: grants; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.grants (
    principal text NOT NULL,
    tool text NOT NULL,
    revoked boolean DEFAULT false NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: idempotency_keys; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.idempotency_keys (
    scope text NOT NULL,
    principal text NOT NULL,
    key text NOT NULL,
    request_hash text NOT NULL,
    state text NOT NULL,
    status_code integer,
    response text,
    holder text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    answered_at timestamp with time zone,
    CONSTRAINT idempotency_keys_check CHECK (((state = 'working'::text) = (expires_at IS NOT NULL))),
    CONSTRAINT idempotency_keys_check1 CHECK (((state = 'done'::text) = ((status_code IS NOT NULL) AND (response IS NOT NULL) AND (answered_at IS NOT NULL)))),
    CONSTRAINT idempotency_keys_key_check CHECK (((length(key) >= 1) AND (length(key) <= 255))),
    CONSTRAINT idempotency_keys_state_check CHECK ((state = ANY (ARRAY['working'::text, 'done'::text])))
);


--
-- Name: inputs; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.inputs (
    id uuid NOT NULL,
    run_id uuid NOT NULL,
    step integer NOT NULL,
    idx integer NOT NULL,
    question text NOT NULL,
    status text DEFAULT 'pending'::text NOT NULL,
    text text,
    given_by text,
    asked_at timestamp with time zone DEFAULT now() NOT NULL,
    given_at timestamp with time zone,
    answered_by text,
    CONSTRAINT inputs_status_check CHECK ((status = ANY (ARRAY['pending'::text, 'given'::text])))
);


--
-- Name: knowledge; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.knowledge (
    source text NOT NULL,
    key text NOT NULL,
    project text NOT NULL,
    title text DEFAULT ''::text NOT NULL,
    body text DEFAULT ''::text NOT NULL,
    labels text[] DEFAULT '{}'::text[] NOT NULL,
    status text,
    updated_at timestamp with time zone,
    job_id uuid,
    tsv tsvector GENERATED ALWAYS AS ((setweight(to_tsvector('english'::regconfig, title), 'A'::"char") || setweight(to_tsvector('english'::regconfig, body), 'B'::"char"))) STORED
);


--
-- Name: leases; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.leases (
    name text NOT NULL,
    holder text NOT NULL,
    expires_at timestamp with time zone NOT NULL,
    acquired_at timestamp with time zone DEFAULT now() NOT NULL,
    handed_why text,
    handed_attempt integer,
    CONSTRAINT leases_handed CHECK (((handed_why IS NULL) = (handed_attempt IS NULL))),
    CONSTRAINT leases_handed_why_check CHECK ((handed_why = ANY (ARRAY['dead'::text, 'lapsed'::text, 'acquired'::text])))
);


--
-- Name: principals; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.principals (
    name text NOT NULL,
    may_run boolean DEFAULT true NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: process_lock_keys; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.process_lock_keys
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: processes; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.processes (
    id text NOT NULL,
    lock_key integer NOT NULL,
    pid integer NOT NULL,
    host text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    ended_at timestamp with time zone,
    draining_at timestamp with time zone,
    ended_how text,
    stalled_at timestamp with time zone,
    CONSTRAINT processes_ended_how_check CHECK ((ended_how = ANY (ARRAY['stopped'::text, 'died'::text, 'stalled'::text])))
);


--
-- Name: quarantines; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.quarantines (
    kind text NOT NULL,
    name text NOT NULL,
    reason text DEFAULT ''::text NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT quarantines_kind_check CHECK ((kind = ANY (ARRAY['agent'::text, 'tenant'::text])))
);


--
-- Name: red_team_answers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.red_team_answers (
    job_id uuid NOT NULL,
    idx integer NOT NULL,
    agent text NOT NULL,
    prompt text NOT NULL,
    answer text NOT NULL,
    asked_tools jsonb DEFAULT '[]'::jsonb NOT NULL,
    verdict text NOT NULL,
    answered_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT red_team_answers_asked_tools_check CHECK ((jsonb_typeof(asked_tools) = 'array'::text)),
    CONSTRAINT red_team_answers_idx_check CHECK ((idx >= 0)),
    CONSTRAINT red_team_answers_verdict_check CHECK ((verdict = ANY (ARRAY['refused'::text, 'complied'::text, 'asked_tools'::text, 'leaked_prompt'::text, 'error'::text])))
);


--
-- Name: run_attempts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.run_attempts (
    run_id uuid NOT NULL,
    attempt integer NOT NULL,
    process text NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    first_at timestamp with time zone,
    ended_at timestamp with time zone,
    ended text,
    lost_detected_at timestamp with time zone,
    CONSTRAINT run_attempts_ended CHECK (((ended IS NULL) = (ended_at IS NULL))),
    CONSTRAINT run_attempts_ended_check CHECK ((ended = ANY (ARRAY['finished'::text, 'lost'::text, 'handed_back'::text, 'stalled'::text, 'waiting'::text])))
);


--
-- Name: schedule_fires; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schedule_fires (
    schedule_id uuid NOT NULL,
    fire_at timestamp with time zone NOT NULL,
    run_key text NOT NULL,
    run_id uuid,
    skipped boolean DEFAULT false NOT NULL,
    reason text,
    fired_by text NOT NULL,
    fired_at timestamp with time zone DEFAULT now() NOT NULL,
    outcome text,
    outcome_at timestamp with time zone,
    outcome_attempt integer
);


--
-- Name: schedules; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schedules (
    id uuid NOT NULL,
    name text,
    agent text NOT NULL,
    cron text NOT NULL,
    timezone text NOT NULL,
    input text NOT NULL,
    next_fire_at timestamp with time zone NOT NULL,
    created_by text,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL,
    deleted_at timestamp with time zone,
    deleted_by text
);


--
-- Name: schema_migrations; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.schema_migrations (
    version integer NOT NULL,
    name text NOT NULL,
    applied_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: seal_probe; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.seal_probe (
    only_row boolean DEFAULT true NOT NULL,
    key_id text NOT NULL,
    seal text NOT NULL,
    made_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT seal_probe_only_row_check CHECK (only_row)
);


--
-- Name: signed_requests; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.signed_requests (
    source text NOT NULL,
    digest text NOT NULL,
    delivery_id text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    kept_until timestamp with time zone,
    CONSTRAINT signed_requests_delivery_id_check CHECK (((length(delivery_id) >= 1) AND (length(delivery_id) <= 255))),
    CONSTRAINT signed_requests_digest_check CHECK ((digest ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT signed_requests_source_check CHECK (((length(source) >= 1) AND (length(source) <= 200)))
);


--
-- Name: teams_inbox; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.teams_inbox (
    id bigint NOT NULL,
    activity_id text NOT NULL,
    conversation_id text NOT NULL,
    content_hash text NOT NULL,
    run_key text NOT NULL,
    service_url text NOT NULL,
    team_id text,
    from_id text NOT NULL,
    from_name text,
    actor text NOT NULL,
    text text NOT NULL,
    app_url text NOT NULL,
    activity jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    run_id uuid,
    reason text,
    CONSTRAINT teams_inbox_activity_id_check CHECK (((length(activity_id) >= 1) AND (length(activity_id) <= 256))),
    CONSTRAINT teams_inbox_conversation_id_check CHECK (((length(conversation_id) >= 1) AND (length(conversation_id) <= 1024)))
);


--
-- Name: teams_inbox_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

ALTER TABLE public.teams_inbox ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME public.teams_inbox_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: ticket_events; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.ticket_events (
    event_id text NOT NULL,
    agent text NOT NULL,
    run_id uuid NOT NULL,
    webhook_event text NOT NULL,
    issue_key text NOT NULL,
    body_sha256 text NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT ticket_events_body_sha256_check CHECK ((body_sha256 ~ '^[0-9a-f]{64}$'::text)),
    CONSTRAINT ticket_events_event_id_check CHECK (((length(event_id) >= 1) AND (length(event_id) <= 255)))
);


--
-- Name: tool_policies; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.tool_policies (
    tool text NOT NULL,
    needs_approval boolean NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: transcripts; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.transcripts (
    id bigint NOT NULL,
    run_id uuid NOT NULL,
    at timestamp with time zone DEFAULT now() NOT NULL,
    kind text NOT NULL,
    body jsonb NOT NULL
);


--
-- Name: transcripts_id_seq; Type: SEQUENCE; Schema: public; Owner: -
--

CREATE SEQUENCE public.transcripts_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: transcripts_id_seq; Type: SEQUENCE OWNED BY; Schema: public; Owner: -
--

ALTER SEQUENCE public.transcripts_id_seq OWNED BY public.transcripts.id;


--
-- Name: trigger_deliveries; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.trigger_deliveries (
    trigger text NOT NULL,
    delivery_id text NOT NULL,
    run_id uuid NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT trigger_deliveries_delivery_id_check CHECK (((length(delivery_id) >= 1) AND (length(delivery_id) <= 255)))
);


--
-- Name: trigger_secrets; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.trigger_secrets (
    trigger text NOT NULL,
    n integer NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    ciphertext bytea NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone,
    retired_at timestamp with time zone,
    retired_by text,
    request_key uuid,
    CONSTRAINT trigger_secrets_check CHECK (((retired_at IS NULL) = (retired_by IS NULL))),
    CONSTRAINT trigger_secrets_ciphertext_check CHECK ((length(ciphertext) > 16)),
    CONSTRAINT trigger_secrets_n_check CHECK ((n >= 1)),
    CONSTRAINT trigger_secrets_nonce_check CHECK ((length(nonce) = 12))
);


--
-- Name: triggers; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.triggers (
    name text NOT NULL,
    agent text NOT NULL,
    created_by text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    request_key uuid,
    CONSTRAINT triggers_agent_check CHECK (((length(agent) >= 1) AND (length(agent) <= 200))),
    CONSTRAINT triggers_name_check CHECK ((name ~ '^[A-Za-z0-9][A-Za-z0-9._@-]{0,99}$'::text))
);


--
-- Name: workflow_steps; Type: TABLE; Schema: public; Owner: -
--

CREATE TABLE public.workflow_steps (
    job_id uuid NOT NULL,
    seq integer NOT NULL,
    step_id text NOT NULL,
    kind text NOT NULL,
    tool text,
    agent text,
    key text NOT NULL,
    status text NOT NULL,
    args jsonb,
    output jsonb,
    error text,
    run_id uuid,
    in_flight_until timestamp with time zone,
    settled text,
    attempt integer NOT NULL,
    started_at timestamp with time zone DEFAULT now() NOT NULL,
    ended_at timestamp with time zone,
    CONSTRAINT workflow_steps_kind_check CHECK ((kind = ANY (ARRAY['tool'::text, 'agent'::text]))),
    CONSTRAINT workflow_steps_seq_check CHECK ((seq >= 1)),
    CONSTRAINT workflow_steps_status_check CHECK ((status = ANY (ARRAY['running'::text, 'in_doubt'::text, 'done'::text, 'failed'::text])))
);


--
-- Name: a2a_tasks; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.a2a_tasks (
    owner text NOT NULL,
    id text NOT NULL,
    context_id text NOT NULL,
    state text NOT NULL,
    task jsonb NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: botframework_keys; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.botframework_keys (
    kid text NOT NULL,
    private_pem text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: dedupe; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.dedupe (
    vendor text NOT NULL,
    scope text NOT NULL,
    key text NOT NULL,
    ref text NOT NULL,
    fingerprint text NOT NULL,
    claimed_at timestamp with time zone DEFAULT now() NOT NULL,
    expires_at timestamp with time zone NOT NULL
);


--
-- Name: discord_messages; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.discord_messages (
    id bigint NOT NULL,
    channel_id text NOT NULL,
    author_id text NOT NULL,
    nonce text,
    content text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: fine_tuning_jobs; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.fine_tuning_jobs (
    seq bigint NOT NULL,
    id text NOT NULL,
    model text NOT NULL,
    training_file text NOT NULL,
    validation_file text,
    suffix text,
    metadata jsonb,
    seed integer NOT NULL,
    duration_s double precision NOT NULL,
    failure jsonb,
    examples integer NOT NULL,
    fine_tuned_model text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    cancelled_at timestamp with time zone
);


--
-- Name: fine_tuning_jobs_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.fine_tuning_jobs ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.fine_tuning_jobs_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: incidents; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.incidents (
    seq bigint NOT NULL,
    id text NOT NULL,
    name text NOT NULL,
    summary text,
    severity_id text,
    status_id text NOT NULL,
    mode text NOT NULL,
    visibility text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: incidents_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.incidents ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.incidents_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: jira_comments; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.jira_comments (
    id bigint NOT NULL,
    issue_key text NOT NULL,
    body jsonb NOT NULL,
    properties jsonb DEFAULT '[]'::jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: jira_comments_id_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.jira_comments ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.jira_comments_id_seq
    START WITH 10000
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: jira_issues; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.jira_issues (
    key text NOT NULL,
    id bigint NOT NULL,
    status text DEFAULT 'To Do'::text NOT NULL,
    project text GENERATED ALWAYS AS (split_part(key, '-'::text, 1)) STORED,
    number numeric GENERATED ALWAYS AS ((split_part(key, '-'::text, 2))::numeric) STORED,
    summary text,
    description text,
    labels text[] DEFAULT '{}'::text[] NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL,
    updated_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: jira_issues_id_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.jira_issues ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.jira_issues_id_seq
    START WITH 10000
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: model_requests; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.model_requests (
    id bigint NOT NULL,
    model text NOT NULL,
    conversation text NOT NULL,
    step integer NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    client text
);


--
-- Name: model_requests_id_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.model_requests ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.model_requests_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: openai_files; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.openai_files (
    seq bigint NOT NULL,
    id text NOT NULL,
    filename text NOT NULL,
    purpose text NOT NULL,
    bytes integer NOT NULL,
    content bytea NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: openai_files_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.openai_files ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.openai_files_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: sqs_messages; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.sqs_messages (
    seq bigint NOT NULL,
    id text NOT NULL,
    queue text NOT NULL,
    group_id text NOT NULL,
    deduplication_id text NOT NULL,
    body text NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: sqs_messages_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.sqs_messages ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.sqs_messages_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: teams_replies; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.teams_replies (
    seq bigint NOT NULL,
    channel_id text NOT NULL,
    thread_id text NOT NULL,
    activity jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: teams_replies_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.teams_replies ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.teams_replies_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: token_grants; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.token_grants (
    seq bigint NOT NULL,
    tenant text NOT NULL,
    client_id text,
    scope text,
    status integer NOT NULL,
    error text,
    access_token text,
    expires_at timestamp with time zone,
    requested_at timestamp with time zone DEFAULT now() NOT NULL,
    client text
);


--
-- Name: token_grants_seq_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.token_grants ALTER COLUMN seq ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.token_grants_seq_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: webhook_deliveries; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.webhook_deliveries (
    id text NOT NULL,
    path text NOT NULL,
    idempotency_key text,
    payload jsonb NOT NULL,
    created_at timestamp with time zone DEFAULT now() NOT NULL
);


--
-- Name: writes; Type: TABLE; Schema: standin; Owner: -
--

CREATE TABLE standin.writes (
    id bigint NOT NULL,
    vendor text NOT NULL,
    operation text NOT NULL,
    target text NOT NULL,
    key text,
    effect text NOT NULL,
    status integer NOT NULL,
    ref text,
    body jsonb NOT NULL,
    received_at timestamp with time zone DEFAULT now() NOT NULL,
    client text,
    CONSTRAINT writes_effect_check CHECK ((effect = ANY (ARRAY['applied'::text, 'deduped'::text, 'refused'::text])))
);


--
-- Name: writes_id_seq; Type: SEQUENCE; Schema: standin; Owner: -
--

ALTER TABLE standin.writes ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY (
    SEQUENCE NAME standin.writes_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);


--
-- Name: audit_log id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log ALTER COLUMN id SET DEFAULT nextval('public.audit_log_id_seq'::regclass);


--
-- Name: transcripts id; Type: DEFAULT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transcripts ALTER COLUMN id SET DEFAULT nextval('public.transcripts_id_seq'::regclass);


--
-- Data for Name: a2a_tasks; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: answers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: api_tokens; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.api_tokens VALUES ('previous-release-admin', 'admin', NULL, '5084faf4fdf1a0e8ed7292995d3bb3b4aa1822de7fe00aa9a2607a20ac66ed0b', '2026-12-06 13:23:39.664768+00', NULL);


--
-- Data for Name: approvals; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: audit_log; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.audit_log VALUES (1, '2026-12-06 13:23:39.664768+00', 'token.created', NULL, 'cli', '{"name": "previous-release-admin", "role": "admin", "agents": null}');
INSERT INTO public.audit_log VALUES (2, '2026-12-06 13:23:41.889352+00', 'agent.run.created', '99399840-2815-49a9-997b-adb39f8b6dbf', 'previous-release-admin', '{"agent": "triage", "status": "running", "channel": "api", "parent_run_id": null}');
INSERT INTO public.audit_log VALUES (3, '2026-12-06 13:23:43.453779+00', 'agent.run.created', 'a7085e80-4581-4d97-983b-8771078f5548', 'previous-release-admin', '{"agent": "triage", "status": "running", "channel": "api", "parent_run_id": null}');
INSERT INTO public.audit_log VALUES (4, '2026-12-06 13:23:45.049441+00', 'agent.run.created', '30ba1231-0c16-4419-84e5-4687aebf7142', 'previous-release-admin', '{"agent": "triage", "status": "running", "channel": "api", "parent_run_id": null}');
INSERT INTO public.audit_log VALUES (5, '2026-12-06 13:23:46.614375+00', 'agent.run.created', '814bfaa4-2170-43ca-a3f8-5af09c3e6555', 'previous-release-admin', '{"agent": "triage", "status": "running", "channel": "api", "parent_run_id": null}');


--
-- Data for Name: calls; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.calls VALUES ('a7085e80-4581-4d97-983b-8771078f5548', 1, 0, 1, 'call_kwKK19qMXKRiWlA4O4Znl8FF', 'jira_get_issue', 'read', 'tqzhkttyr7mv7frycy3tgaewh', NULL, '{"issue_key": "OPS-7002"}', 'allow', 'done', '{"result": {"id": "10000", "key": "OPS-7002", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7002", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:43.480+0000", "project": {"key": "OPS"}, "summary": "Search returns stale results", "updated": "2026-12-06T13:23:43.480+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Search returns stale results. Reported by customer #7825; affects 27 users.", "type": "text"}]}], "version": 1}}}}', 'read', '2026-12-06 13:23:43.485067+00', '2026-12-06 13:23:43.485067+00', NULL, NULL, NULL, '2026-12-06 13:23:43.462458+00', '2026-12-06 13:23:43.482758+00');
INSERT INTO public.calls VALUES ('30ba1231-0c16-4419-84e5-4687aebf7142', 1, 0, 1, 'call_VQXxM2uVFpgWVwh6czCXoThD', 'jira_get_issue', 'read', 'tq5wixrjzfysqccfcj6hx5ian', NULL, '{"issue_key": "OPS-7003"}', 'allow', 'done', '{"result": {"id": "10001", "key": "OPS-7003", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7003", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:45.060+0000", "project": {"key": "OPS"}, "summary": "Webhook retries pile up", "updated": "2026-12-06T13:23:45.060+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Webhook retries pile up. Reported by customer #6225; affects 27 users.", "type": "text"}]}], "version": 1}}}}', 'read', '2026-12-06 13:23:45.063769+00', '2026-12-06 13:23:45.063769+00', NULL, NULL, NULL, '2026-12-06 13:23:45.058738+00', '2026-12-06 13:23:45.061719+00');
INSERT INTO public.calls VALUES ('30ba1231-0c16-4419-84e5-4687aebf7142', 2, 0, 1, 'call_3QhuK0U3NO7ZZrLSIsATc15r', 'incidentio_create_incident', 'keyed_write', 'tqy4rk4e7l7dvcqr723zkshxf', 'tqy4rk4e7l7dvcqr723zkshxf', '{"name": "OPS-7003: service degradation reported", "summary": "Opened by the triage agent for OPS-7003. Reported: Triage OPS-7003: checkout is failing", "severity": "minor"}', 'allow', 'in_doubt', NULL, NULL, '2026-12-06 13:23:45.065878+00', '2026-12-06 13:23:45.065878+00', '2026-12-06 13:23:55.065878+00', NULL, '2026-12-06 13:23:45.065878+00', NULL, NULL);
INSERT INTO public.calls VALUES ('814bfaa4-2170-43ca-a3f8-5af09c3e6555', 1, 0, 1, 'call_TVjPsmCJ0N6E8eWEIHcWrFfD', 'jira_get_issue', 'read', 'tqlabsegxmch3un4hgbjag7dq', NULL, '{"issue_key": "OPS-7004"}', 'allow', 'done', '{"result": {"id": "10002", "key": "OPS-7004", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7004", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:46.627+0000", "project": {"key": "OPS"}, "summary": "Password reset mail never arrives", "updated": "2026-12-06T13:23:46.627+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Password reset mail never arrives. Reported by customer #9251; affects 13 users.", "type": "text"}]}], "version": 1}}}}', 'read', '2026-12-06 13:23:46.631416+00', '2026-12-06 13:23:46.631416+00', NULL, NULL, NULL, '2026-12-06 13:23:46.625435+00', '2026-12-06 13:23:46.629085+00');
INSERT INTO public.calls VALUES ('814bfaa4-2170-43ca-a3f8-5af09c3e6555', 2, 0, 1, 'call_7Qs7UBmevjatxv3N8ZGYgD5s', 'incidentio_create_incident', 'keyed_write', 'tqcoufbicaahhl7ofm5e4mju6', 'tqcoufbicaahhl7ofm5e4mju6', '{"name": "OPS-7004: service degradation reported", "summary": "Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing", "severity": "minor"}', 'allow', 'in_doubt', NULL, NULL, '2026-12-06 13:23:46.634762+00', '2026-12-06 13:23:46.634762+00', '2026-12-06 13:23:56.634762+00', NULL, '2026-12-06 13:23:46.634762+00', NULL, NULL);


--
-- Data for Name: channels; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: checkpoints; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.checkpoints VALUES ('99399840-2815-49a9-997b-adb39f8b6dbf', 1, 1, 0, '{"agent":"triage","agent_loop":"main","answer":null,"calls":[{"args":{"issue_key":"OPS-7001"},"args_error":null,"id":"call_L2wlK4SL4NzwoswJUO6BJzjr","idx":0,"step_key":"tqtmnle52mmlwvymiyanhvtfj","tool":"jira_get_issue","tool_class":"read"}],"completion_tokens":50,"correlation_id":"99399840-2815-49a9-997b-adb39f8b6dbf","delegation_keys":{},"history":[{"calls":["jira_get_issue"],"step":1}],"messages":[{"content":"You triage operations tickets. Read the Jira issue named in the request, open an incident in incident.io for it, comment on the Jira issue with the incident, reply in the on-call Teams thread, then answer with a one-line summary.","role":"system"},{"content":"Triage OPS-7001: checkout is failing","role":"user"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"issue_key\": \"OPS-7001\"}","name":"jira_get_issue"},"id":"call_L2wlK4SL4NzwoswJUO6BJzjr","type":"function"}]}],"prompt_tokens":81,"step":1,"unflushed":[],"unflushed_calls":[]}', '17ddef5d51fbf13a2bc922cc723364803738c6b3990ec21a0652d83eea70edfb', 'crash', '2026-12-06 13:23:41.901195+00', 'e38cb3beee459ed46e30751635ba708a7a7a0732dd841a390d1b5edb4a6d205e', 1, 0, 2);
INSERT INTO public.checkpoints VALUES ('a7085e80-4581-4d97-983b-8771078f5548', 1, 2, 0, '{"agent":"triage","agent_loop":"main","answer":null,"calls":[{"args":{"name":"OPS-7002: service degradation reported","severity":"minor","summary":"Opened by the triage agent for OPS-7002. Reported: Triage OPS-7002: checkout is failing"},"args_error":null,"id":"call_9kS8k7DWBfXl19A8Mt8RaYVl","idx":0,"step_key":"tqpj4cajvmx23sqmqpt6oqn7a","tool":"incidentio_create_incident","tool_class":"keyed_write"}],"completion_tokens":142,"correlation_id":"a7085e80-4581-4d97-983b-8771078f5548","delegation_keys":{},"history":[{"calls":["jira_get_issue"],"step":1},{"calls":["incidentio_create_incident"],"step":2}],"messages":[{"content":"You triage operations tickets. Read the Jira issue named in the request, open an incident in incident.io for it, comment on the Jira issue with the incident, reply in the on-call Teams thread, then answer with a one-line summary.","role":"system"},{"content":"Triage OPS-7002: checkout is failing","role":"user"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"issue_key\": \"OPS-7002\"}","name":"jira_get_issue"},"id":"call_kwKK19qMXKRiWlA4O4Znl8FF","type":"function"}]},{"content":"{\"id\":\"10000\",\"key\":\"OPS-7002\",\"self\":\"http://127.0.0.1:42515/jira/rest/api/3/OPS-7002\",\"fields\":{\"summary\":\"Search returns stale results\",\"description\":{\"type\":\"doc\",\"version\":1,\"content\":[{\"type\":\"paragraph\",\"content\":[{\"type\":\"text\",\"text\":\"Search returns stale results. Reported by customer #7825; affects 27 users.\"}]}]},\"status\":{\"id\":\"10000\",\"name\":\"To Do\",\"statusCategory\":{\"key\":\"new\",\"name\":\"To Do\"}},\"issuetype\":{\"name\":\"Bug\"},\"project\":{\"key\":\"OPS\"},\"labels\":[],\"created\":\"2026-12-06T13:23:43.480+0000\",\"updated\":\"2026-12-06T13:23:43.480+0000\"}}","role":"tool","tool_call_id":"call_kwKK19qMXKRiWlA4O4Znl8FF"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"name\": \"OPS-7002: service degradation reported\", \"summary\": \"Opened by the triage agent for OPS-7002. Reported: Triage OPS-7002: checkout is failing\", \"severity\": \"minor\"}","name":"incidentio_create_incident"},"id":"call_9kS8k7DWBfXl19A8Mt8RaYVl","type":"function"}]}],"prompt_tokens":389,"step":2,"unflushed":[],"unflushed_calls":[]}', '8fec8f9f79be07fa8594aeb4d9c3faf656871f238163e4efb9f3ce71bbe7481e', 'crash', '2026-12-06 13:23:43.485067+00', '2efc7e55f0b9a5054311be1dcd1a4eadaf7408e345d14b28ae93095cedc2983d', 1, 0, 2);
INSERT INTO public.checkpoints VALUES ('30ba1231-0c16-4419-84e5-4687aebf7142', 1, 2, 0, '{"agent":"triage","agent_loop":"main","answer":null,"calls":[{"args":{"name":"OPS-7003: service degradation reported","severity":"minor","summary":"Opened by the triage agent for OPS-7003. Reported: Triage OPS-7003: checkout is failing"},"args_error":null,"id":"call_3QhuK0U3NO7ZZrLSIsATc15r","idx":0,"step_key":"tqy4rk4e7l7dvcqr723zkshxf","tool":"incidentio_create_incident","tool_class":"keyed_write"}],"completion_tokens":142,"correlation_id":"30ba1231-0c16-4419-84e5-4687aebf7142","delegation_keys":{},"history":[{"calls":["jira_get_issue"],"step":1},{"calls":["incidentio_create_incident"],"step":2}],"messages":[{"content":"You triage operations tickets. Read the Jira issue named in the request, open an incident in incident.io for it, comment on the Jira issue with the incident, reply in the on-call Teams thread, then answer with a one-line summary.","role":"system"},{"content":"Triage OPS-7003: checkout is failing","role":"user"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"issue_key\": \"OPS-7003\"}","name":"jira_get_issue"},"id":"call_VQXxM2uVFpgWVwh6czCXoThD","type":"function"}]},{"content":"{\"id\":\"10001\",\"key\":\"OPS-7003\",\"self\":\"http://127.0.0.1:42515/jira/rest/api/3/OPS-7003\",\"fields\":{\"summary\":\"Webhook retries pile up\",\"description\":{\"type\":\"doc\",\"version\":1,\"content\":[{\"type\":\"paragraph\",\"content\":[{\"type\":\"text\",\"text\":\"Webhook retries pile up. Reported by customer #6225; affects 27 users.\"}]}]},\"status\":{\"id\":\"10000\",\"name\":\"To Do\",\"statusCategory\":{\"key\":\"new\",\"name\":\"To Do\"}},\"issuetype\":{\"name\":\"Bug\"},\"project\":{\"key\":\"OPS\"},\"labels\":[],\"created\":\"2026-12-06T13:23:45.060+0000\",\"updated\":\"2026-12-06T13:23:45.060+0000\"}}","role":"tool","tool_call_id":"call_VQXxM2uVFpgWVwh6czCXoThD"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"name\": \"OPS-7003: service degradation reported\", \"summary\": \"Opened by the triage agent for OPS-7003. Reported: Triage OPS-7003: checkout is failing\", \"severity\": \"minor\"}","name":"incidentio_create_incident"},"id":"call_3QhuK0U3NO7ZZrLSIsATc15r","type":"function"}]}],"prompt_tokens":386,"step":2,"unflushed":[],"unflushed_calls":[]}', 'f5f6131b36be2b0890cc8a62f533a77e572a6f9b315c23235eb45725be0eb85b', 'crash', '2026-12-06 13:23:45.063769+00', 'f6b9dffd3f5a81f75cbbc42aa2b66f91785bba00ac0ecc8ae4625e71adb14fc6', 1, 0, 2);
INSERT INTO public.checkpoints VALUES ('814bfaa4-2170-43ca-a3f8-5af09c3e6555', 1, 2, 0, '{"agent":"triage","agent_loop":"main","answer":null,"calls":[{"args":{"name":"OPS-7004: service degradation reported","severity":"minor","summary":"Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing"},"args_error":null,"id":"call_7Qs7UBmevjatxv3N8ZGYgD5s","idx":0,"step_key":"tqcoufbicaahhl7ofm5e4mju6","tool":"incidentio_create_incident","tool_class":"keyed_write"}],"completion_tokens":142,"correlation_id":"814bfaa4-2170-43ca-a3f8-5af09c3e6555","delegation_keys":{},"history":[{"calls":["jira_get_issue"],"step":1},{"calls":["incidentio_create_incident"],"step":2}],"messages":[{"content":"You triage operations tickets. Read the Jira issue named in the request, open an incident in incident.io for it, comment on the Jira issue with the incident, reply in the on-call Teams thread, then answer with a one-line summary.","role":"system"},{"content":"Triage OPS-7004: checkout is failing","role":"user"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"issue_key\": \"OPS-7004\"}","name":"jira_get_issue"},"id":"call_TVjPsmCJ0N6E8eWEIHcWrFfD","type":"function"}]},{"content":"{\"id\":\"10002\",\"key\":\"OPS-7004\",\"self\":\"http://127.0.0.1:42515/jira/rest/api/3/OPS-7004\",\"fields\":{\"summary\":\"Password reset mail never arrives\",\"description\":{\"type\":\"doc\",\"version\":1,\"content\":[{\"type\":\"paragraph\",\"content\":[{\"type\":\"text\",\"text\":\"Password reset mail never arrives. Reported by customer #9251; affects 13 users.\"}]}]},\"status\":{\"id\":\"10000\",\"name\":\"To Do\",\"statusCategory\":{\"key\":\"new\",\"name\":\"To Do\"}},\"issuetype\":{\"name\":\"Bug\"},\"project\":{\"key\":\"OPS\"},\"labels\":[],\"created\":\"2026-12-06T13:23:46.627+0000\",\"updated\":\"2026-12-06T13:23:46.627+0000\"}}","role":"tool","tool_call_id":"call_TVjPsmCJ0N6E8eWEIHcWrFfD"},{"content":null,"role":"assistant","tool_calls":[{"function":{"arguments":"{\"name\": \"OPS-7004: service degradation reported\", \"summary\": \"Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing\", \"severity\": \"minor\"}","name":"incidentio_create_incident"},"id":"call_7Qs7UBmevjatxv3N8ZGYgD5s","type":"function"}]}],"prompt_tokens":391,"step":2,"unflushed":[],"unflushed_calls":[]}', 'ba2b734946d6f92802880ec2ba28988a8c938a1c92e568f7d4d6fbe64dd3e2dd', 'crash', '2026-12-06 13:23:46.631416+00', '2baa629286ce6d00ec42195c1a8fd3843c0b5ef24d9298ff4ca6f14b594374e0', 1, 0, 2);


--
-- Data for Name: classifiers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: console_sessions; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: grants; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.grants VALUES ('ops-bot', 'jira_get_issue', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'incidentio_create_incident', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'jira_add_comment', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'teams_reply', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'discord_send_message', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'sqs_send_message', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'webhook_post', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'delegate_to_agent', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'ask_remote_agent', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'knowledge_search', false, '2026-12-06 13:23:41.772035+00');
INSERT INTO public.grants VALUES ('ops-bot', 'jira_transition', false, '2026-12-06 13:23:41.772035+00');


--
-- Data for Name: idempotency_keys; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: inputs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: jobs; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: knowledge; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: leases; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.leases VALUES ('checkpoint:99399840-2815-49a9-997b-adb39f8b6dbf', 'vm:24348:266d9510a4da', '2026-12-06 13:23:49.889352+00', '2026-12-06 13:23:41.889352+00', NULL, NULL);
INSERT INTO public.leases VALUES ('checkpoint:a7085e80-4581-4d97-983b-8771078f5548', 'vm:24363:de3071f131cd', '2026-12-06 13:23:51.453779+00', '2026-12-06 13:23:43.453779+00', NULL, NULL);
INSERT INTO public.leases VALUES ('checkpoint:30ba1231-0c16-4419-84e5-4687aebf7142', 'vm:24378:cd1d1c4ef847', '2026-12-06 13:23:53.049441+00', '2026-12-06 13:23:45.049441+00', NULL, NULL);
INSERT INTO public.leases VALUES ('checkpoint:814bfaa4-2170-43ca-a3f8-5af09c3e6555', 'vm:24392:9a491d65d1bb', '2026-12-06 13:23:54.614375+00', '2026-12-06 13:23:46.614375+00', NULL, NULL);


--
-- Data for Name: principals; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.principals VALUES ('ops-bot', true, '2026-12-06 13:23:41.772035+00');


--
-- Data for Name: processes; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.processes VALUES ('vm:24348:266d9510a4da', 1, 24348, 'vm', '2026-12-06 13:23:41.78118+00', NULL, NULL, NULL, NULL);
INSERT INTO public.processes VALUES ('vm:24363:de3071f131cd', 2, 24363, 'vm', '2026-12-06 13:23:43.319863+00', NULL, NULL, NULL, NULL);
INSERT INTO public.processes VALUES ('vm:24378:cd1d1c4ef847', 3, 24378, 'vm', '2026-12-06 13:23:44.946101+00', NULL, NULL, NULL, NULL);
INSERT INTO public.processes VALUES ('vm:24392:9a491d65d1bb', 4, 24392, 'vm', '2026-12-06 13:23:46.487682+00', NULL, NULL, NULL, NULL);


--
-- Data for Name: quarantines; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: red_team_answers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: run_attempts; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.run_attempts VALUES ('99399840-2815-49a9-997b-adb39f8b6dbf', 1, 'vm:24348:266d9510a4da', '2026-12-06 13:23:41.889352+00', '2026-12-06 13:23:41.901195+00', NULL, NULL, NULL);
INSERT INTO public.run_attempts VALUES ('a7085e80-4581-4d97-983b-8771078f5548', 1, 'vm:24363:de3071f131cd', '2026-12-06 13:23:43.453779+00', '2026-12-06 13:23:43.461102+00', NULL, NULL, NULL);
INSERT INTO public.run_attempts VALUES ('30ba1231-0c16-4419-84e5-4687aebf7142', 1, 'vm:24378:cd1d1c4ef847', '2026-12-06 13:23:45.049441+00', '2026-12-06 13:23:45.057051+00', NULL, NULL, NULL);
INSERT INTO public.run_attempts VALUES ('814bfaa4-2170-43ca-a3f8-5af09c3e6555', 1, 'vm:24392:9a491d65d1bb', '2026-12-06 13:23:46.614375+00', '2026-12-06 13:23:46.622978+00', NULL, NULL, NULL);


--
-- Data for Name: runs; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.runs VALUES ('99399840-2815-49a9-997b-adb39f8b6dbf', 'triage', 'Triage OPS-7001: checkout is failing', 'ops-bot', 'acme', 'api', true, '99399840-2815-49a9-997b-adb39f8b6dbf', NULL, NULL, 'running', NULL, NULL, NULL, NULL, NULL, NULL, '2026-12-06 13:23:41.889352+00', '2026-12-06 13:23:41.889352+00', NULL, 'previous-release-admin', '2026-12-06 13:23:41.889352+00', DEFAULT);
INSERT INTO public.runs VALUES ('a7085e80-4581-4d97-983b-8771078f5548', 'triage', 'Triage OPS-7002: checkout is failing', 'ops-bot', 'acme', 'api', true, 'a7085e80-4581-4d97-983b-8771078f5548', NULL, NULL, 'running', NULL, NULL, NULL, NULL, NULL, NULL, '2026-12-06 13:23:43.453779+00', '2026-12-06 13:23:43.453779+00', NULL, 'previous-release-admin', '2026-12-06 13:23:43.453779+00', DEFAULT);
INSERT INTO public.runs VALUES ('30ba1231-0c16-4419-84e5-4687aebf7142', 'triage', 'Triage OPS-7003: checkout is failing', 'ops-bot', 'acme', 'api', true, '30ba1231-0c16-4419-84e5-4687aebf7142', NULL, NULL, 'running', NULL, NULL, NULL, NULL, NULL, NULL, '2026-12-06 13:23:45.049441+00', '2026-12-06 13:23:45.049441+00', NULL, 'previous-release-admin', '2026-12-06 13:23:45.049441+00', DEFAULT);
INSERT INTO public.runs VALUES ('814bfaa4-2170-43ca-a3f8-5af09c3e6555', 'triage', 'Triage OPS-7004: checkout is failing', 'ops-bot', 'acme', 'api', true, '814bfaa4-2170-43ca-a3f8-5af09c3e6555', NULL, NULL, 'running', NULL, NULL, NULL, NULL, NULL, NULL, '2026-12-06 13:23:46.614375+00', '2026-12-06 13:23:46.614375+00', NULL, 'previous-release-admin', '2026-12-06 13:23:46.614375+00', DEFAULT);


--
-- Data for Name: schedule_fires; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: schedules; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.schema_migrations VALUES (1, 'init', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (2, 'processes', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (3, 'run_store', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (4, 'tokens', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (5, 'entries', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (6, 'a2a', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (7, 'remote_refs', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (8, 'idempotency', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (9, 'schedules', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (10, 'teams_inbox', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (11, 'triggers', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (12, 'spread', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (13, 'jobs', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (14, 'knowledge', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (15, 'workflows', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (16, 'classifiers', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (17, 'give_runs', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (18, 'take_run_answered', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (19, 'signed_once', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (20, 'run_key_namespaces', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (21, 'one_answer', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (22, 'run_list', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (23, 'timeline', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (24, 'console_sessions', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (25, 'job_fence', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (26, 'durable', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (27, 'token_changes', '2026-12-06 13:23:39.452313+00');
INSERT INTO public.schema_migrations VALUES (28, 'gate_context', '2026-12-06 13:23:39.452313+00');


--
-- Data for Name: seal_probe; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.seal_probe VALUES (true, 'crash', 'c6303a1fed4eba723606a75989648d8d187240a9916b84667bbd78b9053de4fa', '2026-12-06 13:23:41.720473+00');


--
-- Data for Name: signed_requests; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: teams_inbox; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: ticket_events; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: tool_policies; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.tool_policies VALUES ('jira_transition', true, '2026-12-06 13:23:41.772035+00');


--
-- Data for Name: transcripts; Type: TABLE DATA; Schema: public; Owner: -
--

INSERT INTO public.transcripts VALUES (1, '99399840-2815-49a9-997b-adb39f8b6dbf', '2026-12-06 13:23:41.889352+00', 'input', '{"agent": "triage", "input": "Triage OPS-7001: checkout is failing"}');
INSERT INTO public.transcripts VALUES (2, '99399840-2815-49a9-997b-adb39f8b6dbf', '2026-12-06 13:23:41.901195+00', 'entries', '{"entries": [{"body": {"step": 1, "text": null, "calls": [{"id": "call_L2wlK4SL4NzwoswJUO6BJzjr", "key": "tqtmnle52mmlwvymiyanhvtfj", "tool": "jira_get_issue", "class": "read"}], "tokens": 131, "attempt": 1, "model_ms": 6.414, "started_at": 1796563421.893846}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 1, "tool": "jira_get_issue", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 1, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (3, 'a7085e80-4581-4d97-983b-8771078f5548', '2026-12-06 13:23:43.453779+00', 'input', '{"agent": "triage", "input": "Triage OPS-7002: checkout is failing"}');
INSERT INTO public.transcripts VALUES (4, 'a7085e80-4581-4d97-983b-8771078f5548', '2026-12-06 13:23:43.461102+00', 'entries', '{"entries": [{"body": {"step": 1, "text": null, "calls": [{"id": "call_kwKK19qMXKRiWlA4O4Znl8FF", "key": "tqzhkttyr7mv7frycy3tgaewh", "tool": "jira_get_issue", "class": "read"}], "tokens": 131, "attempt": 1, "model_ms": 3.232, "started_at": 1796563423.457026}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 1, "tool": "jira_get_issue", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 1, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (5, 'a7085e80-4581-4d97-983b-8771078f5548', '2026-12-06 13:23:43.485067+00', 'entries', '{"entries": [{"body": {"ok": true, "cls": "read", "how": "read", "idx": 0, "key": null, "step": 1, "tool": "jira_get_issue", "result": {"id": "10000", "key": "OPS-7002", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7002", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:43.480+0000", "project": {"key": "OPS"}, "summary": "Search returns stale results", "updated": "2026-12-06T13:23:43.480+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Search returns stale results. Reported by customer #7825; affects 27 users.", "type": "text"}]}], "version": 1}}}}, "kind": "call"}, {"body": {"step": 2, "text": null, "calls": [{"id": "call_9kS8k7DWBfXl19A8Mt8RaYVl", "key": "tqpj4cajvmx23sqmqpt6oqn7a", "tool": "incidentio_create_incident", "class": "keyed_write"}], "tokens": 400, "attempt": 1, "model_ms": 1.774, "started_at": 1796563423.482827}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 2, "tool": "incidentio_create_incident", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 2, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (6, '30ba1231-0c16-4419-84e5-4687aebf7142', '2026-12-06 13:23:45.049441+00', 'input', '{"agent": "triage", "input": "Triage OPS-7003: checkout is failing"}');
INSERT INTO public.transcripts VALUES (7, '30ba1231-0c16-4419-84e5-4687aebf7142', '2026-12-06 13:23:45.057051+00', 'entries', '{"entries": [{"body": {"step": 1, "text": null, "calls": [{"id": "call_VQXxM2uVFpgWVwh6czCXoThD", "key": "tq5wixrjzfysqccfcj6hx5ian", "tool": "jira_get_issue", "class": "read"}], "tokens": 131, "attempt": 1, "model_ms": 3.406, "started_at": 1796563425.05275}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 1, "tool": "jira_get_issue", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 1, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (8, '30ba1231-0c16-4419-84e5-4687aebf7142', '2026-12-06 13:23:45.063769+00', 'entries', '{"entries": [{"body": {"ok": true, "cls": "read", "how": "read", "idx": 0, "key": null, "step": 1, "tool": "jira_get_issue", "result": {"id": "10001", "key": "OPS-7003", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7003", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:45.060+0000", "project": {"key": "OPS"}, "summary": "Webhook retries pile up", "updated": "2026-12-06T13:23:45.060+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Webhook retries pile up. Reported by customer #6225; affects 27 users.", "type": "text"}]}], "version": 1}}}}, "kind": "call"}, {"body": {"step": 2, "text": null, "calls": [{"id": "call_3QhuK0U3NO7ZZrLSIsATc15r", "key": "tqy4rk4e7l7dvcqr723zkshxf", "tool": "incidentio_create_incident", "class": "keyed_write"}], "tokens": 397, "attempt": 1, "model_ms": 1.686, "started_at": 1796563425.061775}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 2, "tool": "incidentio_create_incident", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 2, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (9, '30ba1231-0c16-4419-84e5-4687aebf7142', '2026-12-06 13:23:45.065878+00', 'entries', '{"entries": [{"body": {"cls": "keyed_write", "idx": 0, "key": "tqy4rk4e7l7dvcqr723zkshxf", "step": 2, "tool": "incidentio_create_incident", "what": "in_doubt", "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (10, '814bfaa4-2170-43ca-a3f8-5af09c3e6555', '2026-12-06 13:23:46.614375+00', 'input', '{"agent": "triage", "input": "Triage OPS-7004: checkout is failing"}');
INSERT INTO public.transcripts VALUES (11, '814bfaa4-2170-43ca-a3f8-5af09c3e6555', '2026-12-06 13:23:46.622978+00', 'entries', '{"entries": [{"body": {"step": 1, "text": null, "calls": [{"id": "call_TVjPsmCJ0N6E8eWEIHcWrFfD", "key": "tqlabsegxmch3un4hgbjag7dq", "tool": "jira_get_issue", "class": "read"}], "tokens": 131, "attempt": 1, "model_ms": 3.683, "started_at": 1796563426.618244}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 1, "tool": "jira_get_issue", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 1, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (12, '814bfaa4-2170-43ca-a3f8-5af09c3e6555', '2026-12-06 13:23:46.631416+00', 'entries', '{"entries": [{"body": {"ok": true, "cls": "read", "how": "read", "idx": 0, "key": null, "step": 1, "tool": "jira_get_issue", "result": {"id": "10002", "key": "OPS-7004", "self": "http://127.0.0.1:42515/jira/rest/api/3/OPS-7004", "fields": {"labels": [], "status": {"id": "10000", "name": "To Do", "statusCategory": {"key": "new", "name": "To Do"}}, "created": "2026-12-06T13:23:46.627+0000", "project": {"key": "OPS"}, "summary": "Password reset mail never arrives", "updated": "2026-12-06T13:23:46.627+0000", "issuetype": {"name": "Bug"}, "description": {"type": "doc", "content": [{"type": "paragraph", "content": [{"text": "Password reset mail never arrives. Reported by customer #9251; affects 13 users.", "type": "text"}]}], "version": 1}}}}, "kind": "call"}, {"body": {"step": 2, "text": null, "calls": [{"id": "call_7Qs7UBmevjatxv3N8ZGYgD5s", "key": "tqcoufbicaahhl7ofm5e4mju6", "tool": "incidentio_create_incident", "class": "keyed_write"}], "tokens": 402, "attempt": 1, "model_ms": 1.895, "started_at": 1796563426.629155}, "kind": "model_step"}, {"body": {"idx": 0, "gate": "all", "step": 2, "tool": "incidentio_create_incident", "reason": "", "verdict": "allow"}, "kind": "gate"}, {"body": {"step": 2, "what": "checkpoint", "calls": 1, "statements": 1}, "kind": "statement"}]}');
INSERT INTO public.transcripts VALUES (13, '814bfaa4-2170-43ca-a3f8-5af09c3e6555', '2026-12-06 13:23:46.634762+00', 'entries', '{"entries": [{"body": {"cls": "keyed_write", "idx": 0, "key": "tqcoufbicaahhl7ofm5e4mju6", "step": 2, "tool": "incidentio_create_incident", "what": "in_doubt", "statements": 1}, "kind": "statement"}]}');


--
-- Data for Name: trigger_deliveries; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: trigger_secrets; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: triggers; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: workflow_steps; Type: TABLE DATA; Schema: public; Owner: -
--



--
-- Data for Name: a2a_tasks; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: botframework_keys; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: dedupe; Type: TABLE DATA; Schema: standin; Owner: -
--

INSERT INTO standin.dedupe VALUES ('incidentio', 'incidents', 'tqcoufbicaahhl7ofm5e4mju6', '001A24B865D4F834E1F789EC20', '{"idempotency_key":"tqcoufbicaahhl7ofm5e4mju6","mode":"standard","name":"OPS-7004: service degradation reported","severity_id":"sev_minor","summary":"Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing\n\n[ticketiq-step-key: tqcoufbicaahhl7ofm5e4mju6]","visibility":"public"}', '2026-12-06 13:23:46.639577+00', 'infinity');


--
-- Data for Name: discord_messages; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: fine_tuning_jobs; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: incidents; Type: TABLE DATA; Schema: standin; Owner: -
--

INSERT INTO standin.incidents OVERRIDING SYSTEM VALUE VALUES (1, '001A24B865D4F834E1F789EC20', 'OPS-7004: service degradation reported', 'Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing

[ticketiq-step-key: tqcoufbicaahhl7ofm5e4mju6]', 'sev_minor', 'st_investigating', 'standard', 'public', '2026-12-06 13:23:46.639577+00', '2026-12-06 13:23:46.639577+00');


--
-- Data for Name: jira_comments; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: jira_issues; Type: TABLE DATA; Schema: standin; Owner: -
--

INSERT INTO standin.jira_issues OVERRIDING SYSTEM VALUE VALUES ('OPS-7002', 10000, 'To Do', DEFAULT, DEFAULT, NULL, NULL, '{}', '2026-12-06 13:23:43.480372+00', '2026-12-06 13:23:43.480372+00');
INSERT INTO standin.jira_issues OVERRIDING SYSTEM VALUE VALUES ('OPS-7003', 10001, 'To Do', DEFAULT, DEFAULT, NULL, NULL, '{}', '2026-12-06 13:23:45.060442+00', '2026-12-06 13:23:45.060442+00');
INSERT INTO standin.jira_issues OVERRIDING SYSTEM VALUE VALUES ('OPS-7004', 10002, 'To Do', DEFAULT, DEFAULT, NULL, NULL, '{}', '2026-12-06 13:23:46.627498+00', '2026-12-06 13:23:46.627498+00');


--
-- Data for Name: model_requests; Type: TABLE DATA; Schema: standin; Owner: -
--

INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (1, 'triage', 'c9598199da20094f9b46d577fd162a5f', 0, '2026-12-06 13:23:41.898833+00', 'ticketiq/0.1.0 pid/24348 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (2, 'triage', '35938b8ef283f53073dbca0a4775709f', 0, '2026-12-06 13:23:43.459189+00', 'ticketiq/0.1.0 pid/24363 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (3, 'triage', '35938b8ef283f53073dbca0a4775709f', 1, '2026-12-06 13:23:43.483836+00', 'ticketiq/0.1.0 pid/24363 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (4, 'triage', '4c8e57a7795d9f8cda19d923acf7504c', 0, '2026-12-06 13:23:45.05508+00', 'ticketiq/0.1.0 pid/24378 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (5, 'triage', '4c8e57a7795d9f8cda19d923acf7504c', 1, '2026-12-06 13:23:45.062652+00', 'ticketiq/0.1.0 pid/24378 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (6, 'triage', 'af8abf89b81eb3dc19349286b4a0abc3', 0, '2026-12-06 13:23:46.620703+00', 'ticketiq/0.1.0 pid/24392 host/vm');
INSERT INTO standin.model_requests OVERRIDING SYSTEM VALUE VALUES (7, 'triage', 'af8abf89b81eb3dc19349286b4a0abc3', 1, '2026-12-06 13:23:46.630231+00', 'ticketiq/0.1.0 pid/24392 host/vm');


--
-- Data for Name: openai_files; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: sqs_messages; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: teams_replies; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: token_grants; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: webhook_deliveries; Type: TABLE DATA; Schema: standin; Owner: -
--



--
-- Data for Name: writes; Type: TABLE DATA; Schema: standin; Owner: -
--

INSERT INTO standin.writes OVERRIDING SYSTEM VALUE VALUES (1, 'incidentio', 'create_incident', 'incidents', 'tqcoufbicaahhl7ofm5e4mju6', 'applied', 201, '001A24B865D4F834E1F789EC20', '{"mode": "standard", "name": "OPS-7004: service degradation reported", "summary": "Opened by the triage agent for OPS-7004. Reported: Triage OPS-7004: checkout is failing\n\n[ticketiq-step-key: tqcoufbicaahhl7ofm5e4mju6]", "visibility": "public", "severity_id": "sev_minor", "idempotency_key": "tqcoufbicaahhl7ofm5e4mju6"}', '2026-12-06 13:23:46.639577+00', 'ticketiq/0.1.0 pid/24392 host/vm');


--
-- Name: audit_log_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.audit_log_id_seq', 5, true);


--
-- Name: process_lock_keys; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.process_lock_keys', 4, true);


--
-- Name: teams_inbox_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.teams_inbox_id_seq', 1, false);


--
-- Name: transcripts_id_seq; Type: SEQUENCE SET; Schema: public; Owner: -
--

SELECT pg_catalog.setval('public.transcripts_id_seq', 13, true);


--
-- Name: fine_tuning_jobs_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.fine_tuning_jobs_seq_seq', 1, false);


--
-- Name: incidents_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.incidents_seq_seq', 1, true);


--
-- Name: jira_comments_id_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.jira_comments_id_seq', 10000, false);


--
-- Name: jira_issues_id_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.jira_issues_id_seq', 10002, true);


--
-- Name: model_requests_id_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.model_requests_id_seq', 7, true);


--
-- Name: openai_files_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.openai_files_seq_seq', 1, false);


--
-- Name: sqs_messages_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.sqs_messages_seq_seq', 1, false);


--
-- Name: teams_replies_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.teams_replies_seq_seq', 1, false);


--
-- Name: token_grants_seq_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.token_grants_seq_seq', 1, false);


--
-- Name: writes_id_seq; Type: SEQUENCE SET; Schema: standin; Owner: -
--

SELECT pg_catalog.setval('standin.writes_id_seq', 1, true);


--
-- Name: a2a_tasks a2a_tasks_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.a2a_tasks
    ADD CONSTRAINT a2a_tasks_pkey PRIMARY KEY (run_id);


--
-- Name: answers answers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.answers
    ADD CONSTRAINT answers_pkey PRIMARY KEY (run_id);


--
-- Name: api_tokens api_tokens_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_pkey PRIMARY KEY (name);


--
-- Name: api_tokens api_tokens_token_hash_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.api_tokens
    ADD CONSTRAINT api_tokens_token_hash_key UNIQUE (token_hash);


--
-- Name: approvals approvals_binding; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_binding UNIQUE (run_id, binding);


--
-- Name: approvals approvals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_pkey PRIMARY KEY (id);


--
-- Name: audit_log audit_log_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.audit_log
    ADD CONSTRAINT audit_log_pkey PRIMARY KEY (id);


--
-- Name: calls calls_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.calls
    ADD CONSTRAINT calls_pkey PRIMARY KEY (run_id, step, idx);


--
-- Name: channels channels_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.channels
    ADD CONSTRAINT channels_pkey PRIMARY KEY (name);


--
-- Name: checkpoints checkpoints_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.checkpoints
    ADD CONSTRAINT checkpoints_pkey PRIMARY KEY (run_id);


--
-- Name: classifiers classifiers_job_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.classifiers
    ADD CONSTRAINT classifiers_job_id_key UNIQUE (job_id);


--
-- Name: classifiers classifiers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.classifiers
    ADD CONSTRAINT classifiers_pkey PRIMARY KEY (id);


--
-- Name: console_sessions console_sessions_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.console_sessions
    ADD CONSTRAINT console_sessions_pkey PRIMARY KEY (id_hash);


--
-- Name: grants grants_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.grants
    ADD CONSTRAINT grants_pkey PRIMARY KEY (principal, tool);


--
-- Name: idempotency_keys idempotency_keys_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.idempotency_keys
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (scope, principal, key);


--
-- Name: inputs inputs_answered_once; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inputs
    ADD CONSTRAINT inputs_answered_once UNIQUE (run_id, answered_by);


--
-- Name: inputs inputs_given_by_a_request; Type: CHECK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE public.inputs
    ADD CONSTRAINT inputs_given_by_a_request CHECK (((status = 'pending'::text) OR (answered_by IS NOT NULL))) NOT VALID;


--
-- Name: inputs inputs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inputs
    ADD CONSTRAINT inputs_pkey PRIMARY KEY (id);


--
-- Name: inputs inputs_run_id_step_idx_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inputs
    ADD CONSTRAINT inputs_run_id_step_idx_key UNIQUE (run_id, step, idx);


--
-- Name: jobs jobs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_pkey PRIMARY KEY (id);


--
-- Name: knowledge knowledge_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.knowledge
    ADD CONSTRAINT knowledge_pkey PRIMARY KEY (source, key);


--
-- Name: leases leases_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.leases
    ADD CONSTRAINT leases_pkey PRIMARY KEY (name);


--
-- Name: principals principals_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.principals
    ADD CONSTRAINT principals_pkey PRIMARY KEY (name);


--
-- Name: processes processes_lock_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.processes
    ADD CONSTRAINT processes_lock_key_key UNIQUE (lock_key);


--
-- Name: processes processes_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.processes
    ADD CONSTRAINT processes_pkey PRIMARY KEY (id);


--
-- Name: quarantines quarantines_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.quarantines
    ADD CONSTRAINT quarantines_pkey PRIMARY KEY (kind, name);


--
-- Name: red_team_answers red_team_answers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.red_team_answers
    ADD CONSTRAINT red_team_answers_pkey PRIMARY KEY (job_id, idx);


--
-- Name: run_attempts run_attempts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_pkey PRIMARY KEY (run_id, attempt);


--
-- Name: runs runs_delegation_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_delegation_key_key UNIQUE (delegation_key);


--
-- Name: runs runs_idempotency_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_idempotency_key_key UNIQUE (idempotency_key);


--
-- Name: runs runs_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);


--
-- Name: schedule_fires schedule_fires_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_pkey PRIMARY KEY (schedule_id, fire_at);


--
-- Name: schedule_fires schedule_fires_run_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_run_key_key UNIQUE (run_key);


--
-- Name: schedules schedules_name_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_name_key UNIQUE (name);


--
-- Name: schedules schedules_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedules
    ADD CONSTRAINT schedules_pkey PRIMARY KEY (id);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: seal_probe seal_probe_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.seal_probe
    ADD CONSTRAINT seal_probe_pkey PRIMARY KEY (only_row);


--
-- Name: signed_requests signed_requests_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.signed_requests
    ADD CONSTRAINT signed_requests_pkey PRIMARY KEY (source, digest);


--
-- Name: teams_inbox teams_inbox_conversation_id_activity_id_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.teams_inbox
    ADD CONSTRAINT teams_inbox_conversation_id_activity_id_key UNIQUE (conversation_id, activity_id);


--
-- Name: teams_inbox teams_inbox_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.teams_inbox
    ADD CONSTRAINT teams_inbox_pkey PRIMARY KEY (id);


--
-- Name: teams_inbox teams_inbox_run_key_key; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.teams_inbox
    ADD CONSTRAINT teams_inbox_run_key_key UNIQUE (run_key);


--
-- Name: ticket_events ticket_events_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ticket_events
    ADD CONSTRAINT ticket_events_pkey PRIMARY KEY (event_id, agent);


--
-- Name: tool_policies tool_policies_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.tool_policies
    ADD CONSTRAINT tool_policies_pkey PRIMARY KEY (tool);


--
-- Name: transcripts transcripts_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transcripts
    ADD CONSTRAINT transcripts_pkey PRIMARY KEY (id);


--
-- Name: trigger_deliveries trigger_deliveries_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.trigger_deliveries
    ADD CONSTRAINT trigger_deliveries_pkey PRIMARY KEY (trigger, delivery_id);


--
-- Name: trigger_secrets trigger_secrets_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.trigger_secrets
    ADD CONSTRAINT trigger_secrets_pkey PRIMARY KEY (trigger, n);


--
-- Name: triggers triggers_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.triggers
    ADD CONSTRAINT triggers_pkey PRIMARY KEY (name);


--
-- Name: workflow_steps workflow_steps_pkey; Type: CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workflow_steps
    ADD CONSTRAINT workflow_steps_pkey PRIMARY KEY (job_id, seq);


--
-- Name: a2a_tasks a2a_tasks_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.a2a_tasks
    ADD CONSTRAINT a2a_tasks_pkey PRIMARY KEY (owner, id);


--
-- Name: botframework_keys botframework_keys_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.botframework_keys
    ADD CONSTRAINT botframework_keys_pkey PRIMARY KEY (kid);


--
-- Name: dedupe dedupe_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.dedupe
    ADD CONSTRAINT dedupe_pkey PRIMARY KEY (vendor, scope, key);


--
-- Name: discord_messages discord_messages_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.discord_messages
    ADD CONSTRAINT discord_messages_pkey PRIMARY KEY (id);


--
-- Name: fine_tuning_jobs fine_tuning_jobs_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.fine_tuning_jobs
    ADD CONSTRAINT fine_tuning_jobs_pkey PRIMARY KEY (id);


--
-- Name: fine_tuning_jobs fine_tuning_jobs_seq_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.fine_tuning_jobs
    ADD CONSTRAINT fine_tuning_jobs_seq_key UNIQUE (seq);


--
-- Name: incidents incidents_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.incidents
    ADD CONSTRAINT incidents_pkey PRIMARY KEY (id);


--
-- Name: incidents incidents_seq_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.incidents
    ADD CONSTRAINT incidents_seq_key UNIQUE (seq);


--
-- Name: jira_comments jira_comments_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.jira_comments
    ADD CONSTRAINT jira_comments_pkey PRIMARY KEY (id);


--
-- Name: jira_issues jira_issues_id_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.jira_issues
    ADD CONSTRAINT jira_issues_id_key UNIQUE (id);


--
-- Name: jira_issues jira_issues_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.jira_issues
    ADD CONSTRAINT jira_issues_pkey PRIMARY KEY (key);


--
-- Name: model_requests model_requests_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.model_requests
    ADD CONSTRAINT model_requests_pkey PRIMARY KEY (id);


--
-- Name: openai_files openai_files_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.openai_files
    ADD CONSTRAINT openai_files_pkey PRIMARY KEY (id);


--
-- Name: openai_files openai_files_seq_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.openai_files
    ADD CONSTRAINT openai_files_seq_key UNIQUE (seq);


--
-- Name: sqs_messages sqs_messages_id_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.sqs_messages
    ADD CONSTRAINT sqs_messages_id_key UNIQUE (id);


--
-- Name: sqs_messages sqs_messages_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.sqs_messages
    ADD CONSTRAINT sqs_messages_pkey PRIMARY KEY (seq);


--
-- Name: teams_replies teams_replies_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.teams_replies
    ADD CONSTRAINT teams_replies_pkey PRIMARY KEY (seq);


--
-- Name: token_grants token_grants_access_token_key; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.token_grants
    ADD CONSTRAINT token_grants_access_token_key UNIQUE (access_token);


--
-- Name: token_grants token_grants_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.token_grants
    ADD CONSTRAINT token_grants_pkey PRIMARY KEY (seq);


--
-- Name: webhook_deliveries webhook_deliveries_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.webhook_deliveries
    ADD CONSTRAINT webhook_deliveries_pkey PRIMARY KEY (id);


--
-- Name: writes writes_pkey; Type: CONSTRAINT; Schema: standin; Owner: -
--

ALTER TABLE ONLY standin.writes
    ADD CONSTRAINT writes_pkey PRIMARY KEY (id);


--
-- Name: a2a_tasks_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX a2a_tasks_created ON public.a2a_tasks USING btree (created_at DESC, run_id DESC);


--
-- Name: a2a_tasks_created_by; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX a2a_tasks_created_by ON public.a2a_tasks USING btree (created_by, created_at DESC, run_id DESC);


--
-- Name: answers_kept_until; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX answers_kept_until ON public.answers USING btree (kept_until);


--
-- Name: approvals_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_pending ON public.approvals USING btree (created_at) WHERE (status = 'pending'::text);


--
-- Name: approvals_run_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_run_pending ON public.approvals USING btree (run_id) WHERE (status = 'pending'::text);


--
-- Name: approvals_run_step; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX approvals_run_step ON public.approvals USING btree (run_id, step);


--
-- Name: audit_log_inspector_outcome; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX audit_log_inspector_outcome ON public.audit_log USING btree (((detail ->> 'key'::text))) WHERE (action = 'inspector.call'::text);


--
-- Name: audit_log_inspector_started; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX audit_log_inspector_started ON public.audit_log USING btree (((detail ->> 'key'::text))) WHERE (action = 'inspector.call.started'::text);


--
-- Name: audit_log_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX audit_log_run ON public.audit_log USING btree (run_id, id);


--
-- Name: classifiers_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX classifiers_project ON public.classifiers USING btree (project, trained_at DESC);


--
-- Name: console_sessions_expiry; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX console_sessions_expiry ON public.console_sessions USING btree (expires_at);


--
-- Name: idempotency_keys_age; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX idempotency_keys_age ON public.idempotency_keys USING btree (COALESCE(answered_at, created_at));


--
-- Name: inputs_run_pending; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX inputs_run_pending ON public.inputs USING btree (run_id) WHERE (status = 'pending'::text);


--
-- Name: jobs_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_created ON public.jobs USING btree (created_at DESC, id);


--
-- Name: jobs_queued; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_queued ON public.jobs USING btree (created_at) WHERE (status = 'queued'::text);


--
-- Name: jobs_restarted_once; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX jobs_restarted_once ON public.jobs USING btree (restarted_from) WHERE (restarted_from IS NOT NULL);


--
-- Name: jobs_running; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX jobs_running ON public.jobs USING btree (holder) WHERE (status = 'running'::text);


--
-- Name: knowledge_project; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX knowledge_project ON public.knowledge USING btree (source, project, key);


--
-- Name: knowledge_tsv; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX knowledge_tsv ON public.knowledge USING gin (tsv);


--
-- Name: leases_expires; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_expires ON public.leases USING btree (expires_at);


--
-- Name: leases_handed; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_handed ON public.leases USING btree (holder) WHERE (handed_why IS NOT NULL);


--
-- Name: leases_holder; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX leases_holder ON public.leases USING btree (holder);


--
-- Name: processes_ended; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX processes_ended ON public.processes USING btree (ended_at DESC) WHERE (ended_at IS NOT NULL);


--
-- Name: processes_live; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX processes_live ON public.processes USING btree (id) WHERE (ended_at IS NULL);


--
-- Name: runs_agent_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_agent_created ON public.runs USING btree (agent, created_at, id);


--
-- Name: runs_channel_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_channel_created ON public.runs USING btree (channel, created_at, id);


--
-- Name: runs_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_created ON public.runs USING btree (created_at, id);


--
-- Name: runs_created_by_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_created_by_created ON public.runs USING btree (created_by, created_at, id);


--
-- Name: runs_created_by_status_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_created_by_status_created ON public.runs USING btree (created_by, status, created_at, id);


--
-- Name: runs_parent; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_parent ON public.runs USING btree (parent_run_id) WHERE (parent_run_id IS NOT NULL);


--
-- Name: runs_search; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_search ON public.runs USING gin (search);


--
-- Name: runs_status; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_status ON public.runs USING btree (status) WHERE (status = ANY (ARRAY['queued'::text, 'running'::text, 'waiting'::text, 'answered'::text]));


--
-- Name: runs_status_created; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX runs_status_created ON public.runs USING btree (status, created_at, id);


--
-- Name: schedule_fires_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX schedule_fires_run ON public.schedule_fires USING btree (run_id) WHERE (run_id IS NOT NULL);


--
-- Name: schedule_fires_unmade; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX schedule_fires_unmade ON public.schedule_fires USING btree (fired_at) WHERE ((run_id IS NULL) AND (reason IS NULL));


--
-- Name: schedules_due; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX schedules_due ON public.schedules USING btree (next_fire_at) WHERE (deleted_at IS NULL);


--
-- Name: signed_requests_kept_until; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX signed_requests_kept_until ON public.signed_requests USING btree (kept_until) WHERE (kept_until IS NOT NULL);


--
-- Name: teams_inbox_content; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX teams_inbox_content ON public.teams_inbox USING btree (content_hash, received_at DESC);


--
-- Name: teams_inbox_unstarted; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX teams_inbox_unstarted ON public.teams_inbox USING btree (received_at) WHERE ((run_id IS NULL) AND (reason IS NULL));


--
-- Name: transcripts_run; Type: INDEX; Schema: public; Owner: -
--

CREATE INDEX transcripts_run ON public.transcripts USING btree (run_id, id);


--
-- Name: trigger_secrets_request; Type: INDEX; Schema: public; Owner: -
--

CREATE UNIQUE INDEX trigger_secrets_request ON public.trigger_secrets USING btree (trigger, request_key);


--
-- Name: a2a_tasks_updated; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX a2a_tasks_updated ON standin.a2a_tasks USING btree (owner, updated_at DESC, id DESC);


--
-- Name: discord_messages_channel; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX discord_messages_channel ON standin.discord_messages USING btree (channel_id, id);


--
-- Name: fine_tuning_jobs_metadata; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX fine_tuning_jobs_metadata ON standin.fine_tuning_jobs USING gin (metadata jsonb_path_ops);


--
-- Name: jira_comments_issue; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX jira_comments_issue ON standin.jira_comments USING btree (issue_key, id);


--
-- Name: jira_issues_project; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX jira_issues_project ON standin.jira_issues USING btree (project, number);


--
-- Name: model_requests_conversation; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX model_requests_conversation ON standin.model_requests USING btree (conversation, step);


--
-- Name: teams_replies_thread; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX teams_replies_thread ON standin.teams_replies USING btree (channel_id, thread_id, seq);


--
-- Name: writes_key; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX writes_key ON standin.writes USING btree (key);


--
-- Name: writes_vendor_target; Type: INDEX; Schema: standin; Owner: -
--

CREATE INDEX writes_vendor_target ON standin.writes USING btree (vendor, target);


--
-- Name: api_tokens api_tokens_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER api_tokens_changed AFTER DELETE OR UPDATE ON public.api_tokens FOR EACH ROW EXECUTE FUNCTION public.notify_tokens();


--
-- Name: channels channels_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER channels_changed AFTER INSERT OR DELETE OR UPDATE ON public.channels FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: grants grants_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER grants_changed AFTER INSERT OR DELETE OR UPDATE ON public.grants FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: leases leases_taken_lapsed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER leases_taken_lapsed AFTER UPDATE ON public.leases FOR EACH ROW WHEN (((old.holder IS DISTINCT FROM new.holder) AND (old.expires_at < now()))) EXECUTE FUNCTION public.leases_taken_lapsed();


--
-- Name: principals principals_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER principals_changed AFTER INSERT OR DELETE OR UPDATE ON public.principals FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: quarantines quarantines_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER quarantines_changed AFTER INSERT OR DELETE OR UPDATE ON public.quarantines FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: runs runs_status_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_status_changed AFTER UPDATE OF status ON public.runs FOR EACH ROW WHEN ((old.status IS DISTINCT FROM new.status)) EXECUTE FUNCTION public.runs_notify();


--
-- Name: runs runs_stop_requested; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_stop_requested AFTER UPDATE OF stop_requested_at ON public.runs FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: runs runs_updated; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER runs_updated BEFORE UPDATE ON public.runs FOR EACH ROW EXECUTE FUNCTION public.runs_touch();


--
-- Name: tool_policies tool_policies_changed; Type: TRIGGER; Schema: public; Owner: -
--

CREATE TRIGGER tool_policies_changed AFTER INSERT OR DELETE OR UPDATE ON public.tool_policies FOR EACH STATEMENT EXECUTE FUNCTION public.notify_gates();


--
-- Name: a2a_tasks a2a_tasks_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.a2a_tasks
    ADD CONSTRAINT a2a_tasks_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: answers answers_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.answers
    ADD CONSTRAINT answers_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: approvals approvals_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.approvals
    ADD CONSTRAINT approvals_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: calls calls_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.calls
    ADD CONSTRAINT calls_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: checkpoints checkpoints_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.checkpoints
    ADD CONSTRAINT checkpoints_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: classifiers classifiers_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.classifiers
    ADD CONSTRAINT classifiers_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);


--
-- Name: console_sessions console_sessions_token_name_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.console_sessions
    ADD CONSTRAINT console_sessions_token_name_fkey FOREIGN KEY (token_name) REFERENCES public.api_tokens(name);


--
-- Name: grants grants_principal_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.grants
    ADD CONSTRAINT grants_principal_fkey FOREIGN KEY (principal) REFERENCES public.principals(name) ON DELETE CASCADE;


--
-- Name: inputs inputs_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.inputs
    ADD CONSTRAINT inputs_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: jobs jobs_restarted_from_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.jobs
    ADD CONSTRAINT jobs_restarted_from_fkey FOREIGN KEY (restarted_from) REFERENCES public.jobs(id);


--
-- Name: red_team_answers red_team_answers_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.red_team_answers
    ADD CONSTRAINT red_team_answers_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id);


--
-- Name: run_attempts run_attempts_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.run_attempts
    ADD CONSTRAINT run_attempts_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: runs runs_parent_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_parent_run_id_fkey FOREIGN KEY (parent_run_id) REFERENCES public.runs(id);


--
-- Name: schedule_fires schedule_fires_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);


--
-- Name: schedule_fires schedule_fires_schedule_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.schedule_fires
    ADD CONSTRAINT schedule_fires_schedule_id_fkey FOREIGN KEY (schedule_id) REFERENCES public.schedules(id);


--
-- Name: teams_inbox teams_inbox_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.teams_inbox
    ADD CONSTRAINT teams_inbox_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);


--
-- Name: ticket_events ticket_events_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.ticket_events
    ADD CONSTRAINT ticket_events_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);


--
-- Name: transcripts transcripts_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.transcripts
    ADD CONSTRAINT transcripts_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id) ON DELETE CASCADE;


--
-- Name: trigger_deliveries trigger_deliveries_run_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.trigger_deliveries
    ADD CONSTRAINT trigger_deliveries_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);


--
-- Name: trigger_deliveries trigger_deliveries_trigger_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.trigger_deliveries
    ADD CONSTRAINT trigger_deliveries_trigger_fkey FOREIGN KEY (trigger) REFERENCES public.triggers(name);


--
-- Name: trigger_secrets trigger_secrets_trigger_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.trigger_secrets
    ADD CONSTRAINT trigger_secrets_trigger_fkey FOREIGN KEY (trigger) REFERENCES public.triggers(name);


--
-- Name: workflow_steps workflow_steps_job_id_fkey; Type: FK CONSTRAINT; Schema: public; Owner: -
--

ALTER TABLE ONLY public.workflow_steps
    ADD CONSTRAINT workflow_steps_job_id_fkey FOREIGN KEY (job_id) REFERENCES public.jobs(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--


