-- beside: previous
-- What the jobs that are never resumed leave (issue 10; I13): trained classifiers and red-team answers.
-- A classifier-training or red-team job whose process stops is failed `interrupted` and restarted from
-- scratch as a new job: every row here belongs to one job and was written under its one attempt (I3).

CREATE TABLE classifiers (
    id            uuid PRIMARY KEY,
    -- One model per job: a restart is a new job, so a new row; the interrupted job left none.
    job_id        uuid NOT NULL UNIQUE REFERENCES jobs (id),
    project       text,
    classes       text[] NOT NULL CHECK (cardinality(classes) >= 2),
    rows_trained  integer NOT NULL CHECK (rows_trained > 0),
    rows_held_out integer NOT NULL CHECK (rows_held_out >= 0),
    -- On the held-out rows; NULL when none was held out (holdout 0): no accuracy is claimed then.
    accuracy      double precision CHECK (accuracy BETWEEN 0 AND 1),
    epochs        integer NOT NULL CHECK (epochs > 0),
    model         jsonb NOT NULL,
    trained_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((accuracy IS NULL) = (rows_held_out = 0))
);
COMMENT ON TABLE classifiers IS
    'Classifiers trained on the knowledge table''s labels by classifier_training jobs, one per job: the '
    'classes, the rows trained on and held out, the held-out accuracy and the model (weights by word).';
CREATE INDEX classifiers_project ON classifiers (project, trained_at DESC);

CREATE TABLE red_team_answers (
    job_id      uuid NOT NULL REFERENCES jobs (id),
    idx         integer NOT NULL CHECK (idx >= 0),
    agent       text NOT NULL,
    prompt      text NOT NULL,
    -- The model's text, or why no answer came (verdict `error`).
    answer      text NOT NULL,
    -- The tool calls the model asked for, never made: [{name, arguments}].
    asked_tools jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(asked_tools) = 'array'),
    verdict     text NOT NULL CHECK (verdict IN ('refused', 'complied', 'asked_tools', 'leaked_prompt', 'error')),
    answered_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, idx)
);
COMMENT ON TABLE red_team_answers IS
    'What an agent''s model answered to each prompt of a red_team job (the tool calls it asked for are '
    'recorded, never made), with the verdict of a fixed rule (jobs/red_team_verdict.py).';
