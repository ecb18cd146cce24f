-- beside: previous
-- The knowledge table (issue 10): what source syncs pull from outside (every issue of a Jira project),
-- one row per (source, key), searchable by Postgres full-text search (the `knowledge_search` tool).

CREATE TABLE knowledge (
    source     text NOT NULL,
    key        text NOT NULL,
    project    text NOT NULL,
    title      text NOT NULL DEFAULT '',
    body       text NOT NULL DEFAULT '',
    labels     text[] NOT NULL DEFAULT '{}',
    status     text,
    updated_at timestamptz,
    job_id     uuid,
    tsv        tsvector GENERATED ALWAYS AS (
        setweight(to_tsvector('english'::regconfig, title), 'A') ||
        setweight(to_tsvector('english'::regconfig, body), 'B')
    ) STORED,
    PRIMARY KEY (source, key)
);
COMMENT ON TABLE knowledge IS
    'Issues pulled from a source (`jira`) by source-sync jobs: one row per (source, key), upserted, so '
    'a sync resumed after a crash never imports an issue twice. `project` is the source''s project key; '
    '`updated_at` the time the source last changed the issue; `job_id` the sync that last wrote it. `tsv` '
    '(title weighted above body) is what `knowledge_search` matches.';

CREATE INDEX knowledge_tsv ON knowledge USING gin (tsv);
CREATE INDEX knowledge_project ON knowledge (source, project, key);
