"""schema_dump lays pg_dump's text out per object, drops only what says how pg_dump ran, and loses nothing."""

from __future__ import annotations

from collections import Counter

import pytest

from ticketiq.storage.schema_dump import layout, parse


def _entry(name: str, kind: str, body: str, schema: str = "public") -> str:
    return f"--\n-- Name: {name}; Type: {kind}; Schema: {schema}; Owner: -\n--\n\n{body}\n\n\n"


def _dump(*entries: str, key: str = "AbC123", version: str = "18.6") -> str:
    head = (
        f"--\n-- PostgreSQL database dump\n--\n\n\\restrict {key}\n\n"
        f"-- Dumped from database version {version}\n-- Dumped by pg_dump version {version}\n\n"
        "SET statement_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\n"
        "SET client_min_messages = warning;\n\n"
    )
    tail = f"--\n-- PostgreSQL database dump complete\n--\n\n\\unrestrict {key}\n\n"
    return head + "".join(entries) + tail


# In pg_dump's order: functions, tables, sequences, defaults, constraints, indexes, triggers, foreign keys.
ENTRIES = (
    _entry(
        "touch()",
        "FUNCTION",
        "CREATE FUNCTION public.touch() RETURNS trigger\n    LANGUAGE plpgsql\n"
        "    AS $$\nBEGIN\n--\n    RETURN NEW;\nEND\n$$;",
    ),
    _entry("runs", "TABLE", "CREATE TABLE public.runs (\n    id bigint NOT NULL\n);"),
    _entry("TABLE runs", "COMMENT", "COMMENT ON TABLE public.runs IS 'One run.';"),
    _entry("COLUMN runs.id", "COMMENT", "COMMENT ON COLUMN public.runs.id IS 'Its id.';"),
    _entry("calls", "TABLE", "CREATE TABLE public.calls (\n    run_id bigint NOT NULL\n);"),
    _entry("every_run", "VIEW", "CREATE VIEW public.every_run AS\n SELECT runs.id\n   FROM public.runs;"),
    _entry("VIEW every_run", "COMMENT", "COMMENT ON VIEW public.every_run IS 'All of them.';"),
    _entry("runs_id_seq", "SEQUENCE", "CREATE SEQUENCE public.runs_id_seq\n    CACHE 1;"),
    _entry("runs_id_seq", "SEQUENCE OWNED BY", "ALTER SEQUENCE public.runs_id_seq OWNED BY public.runs.id;"),
    _entry("lock_keys", "SEQUENCE", "CREATE SEQUENCE public.lock_keys\n    CACHE 1;"),
    _entry(
        "runs id",
        "DEFAULT",
        "ALTER TABLE ONLY public.runs ALTER COLUMN id SET DEFAULT nextval('public.runs_id_seq'::regclass);",
    ),
    _entry(
        "runs runs_pkey", "CONSTRAINT", "ALTER TABLE ONLY public.runs\n    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);"
    ),
    _entry("calls_run", "INDEX", "CREATE INDEX calls_run ON public.calls USING btree (run_id);"),
    _entry("INDEX calls_run", "COMMENT", "COMMENT ON INDEX public.calls_run IS 'By run.';"),
    _entry(
        "runs runs_touched",
        "TRIGGER",
        "CREATE TRIGGER runs_touched BEFORE UPDATE ON public.runs FOR EACH ROW EXECUTE FUNCTION public.touch();",
    ),
    _entry(
        "calls calls_run_id_fkey",
        "FK CONSTRAINT",
        "ALTER TABLE ONLY public.calls\n    ADD CONSTRAINT calls_run_id_fkey FOREIGN KEY (run_id) "
        "REFERENCES public.runs(id);",
    ),
    _entry("everything", "PUBLICATION", "CREATE PUBLICATION everything FOR ALL TABLES;", schema="-"),
)

LAID_OUT = """\
-- FUNCTION public.touch()

CREATE FUNCTION public.touch() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
--
    RETURN NEW;
END
$$;


-- SEQUENCE public.lock_keys

CREATE SEQUENCE public.lock_keys
    CACHE 1;


-- TABLE public.calls

CREATE TABLE public.calls (
    run_id bigint NOT NULL
);

CREATE INDEX calls_run ON public.calls USING btree (run_id);

COMMENT ON INDEX public.calls_run IS 'By run.';

ALTER TABLE ONLY public.calls
    ADD CONSTRAINT calls_run_id_fkey FOREIGN KEY (run_id) REFERENCES public.runs(id);


-- TABLE public.runs

CREATE TABLE public.runs (
    id bigint NOT NULL
);

COMMENT ON TABLE public.runs IS 'One run.';

COMMENT ON COLUMN public.runs.id IS 'Its id.';

CREATE SEQUENCE public.runs_id_seq
    CACHE 1;

ALTER SEQUENCE public.runs_id_seq OWNED BY public.runs.id;

ALTER TABLE ONLY public.runs ALTER COLUMN id SET DEFAULT nextval('public.runs_id_seq'::regclass);

ALTER TABLE ONLY public.runs
    ADD CONSTRAINT runs_pkey PRIMARY KEY (id);

CREATE TRIGGER runs_touched BEFORE UPDATE ON public.runs FOR EACH ROW EXECUTE FUNCTION public.touch();


-- VIEW public.every_run

CREATE VIEW public.every_run AS
 SELECT runs.id
   FROM public.runs;

COMMENT ON VIEW public.every_run IS 'All of them.';


-- PUBLICATION everything

CREATE PUBLICATION everything FOR ALL TABLES;
"""


def test_each_table_is_shown_with_its_comments_sequences_defaults_constraints_indexes_and_triggers() -> None:
    assert layout(parse(_dump(*ENTRIES))) == LAID_OUT


def test_no_statement_line_is_lost_or_added() -> None:
    def statements(text: str) -> Counter[str]:
        return Counter(line for line in text.splitlines() if line.startswith(("CREATE", "ALTER", "COMMENT")))

    dumped = _dump(*ENTRIES)
    assert statements(layout(parse(dumped))) == statements(dumped)
    assert sum(statements(dumped).values()) == len(ENTRIES)  # one statement each


def test_the_versions_and_the_random_restrict_key_do_not_show() -> None:
    one = layout(parse(_dump(*ENTRIES, key="AbC123", version="18.6")))
    other = layout(parse(_dump(*ENTRIES, key="zYx987", version="18.9")))
    assert one == other
    assert "AbC123" not in one
    assert "18.6" not in one


def test_a_setting_pg_dump_makes_between_entries_is_not_part_of_the_entry_before_it() -> None:
    table = _entry("runs", "TABLE", "CREATE TABLE public.runs (\n    id bigint NOT NULL\n);")
    dump = _dump(table.rstrip("\n") + "\n\nSET default_tablespace = '';\n\n\n")
    assert layout(parse(dump)) == "-- TABLE public.runs\n\nCREATE TABLE public.runs (\n    id bigint NOT NULL\n);\n"


def test_an_unknown_line_before_the_first_entry_is_an_error_not_dropped() -> None:
    dump = _dump(*ENTRIES).replace("SET statement_timeout = 0;\n", "CREATE TABLE stray (id int);\n")
    with pytest.raises(ValueError, match="stray"):
        parse(dump)


def test_a_dump_cut_short_is_an_error() -> None:
    dump = _dump(*ENTRIES)
    with pytest.raises(ValueError, match="no end"):
        parse(dump[: dump.index("--\n-- PostgreSQL database dump complete")])
