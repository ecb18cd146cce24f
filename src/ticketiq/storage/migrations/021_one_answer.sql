-- beside: previous
-- I18: one answer per question. An input records what answered it, unique per run, written by the
-- statement that gives the input (`runs.give_input`): the same request again, however late, finds the
-- question it answered and changes nothing; it can never answer another question.
--
-- What answered it:
--   a2a:<token>:<messageId>         an A2A message naming the task
--   key:<token>:<Idempotency-Key>   POST /v1/runs/{id}/input with an Idempotency-Key, naming no question
--   question:<token>:<question id>  POST /v1/runs/{id}/input naming the question it answers
-- Inputs given before this migration have none; every input given from now on has one.
ALTER TABLE inputs ADD COLUMN answered_by text;
ALTER TABLE inputs ADD CONSTRAINT inputs_answered_once UNIQUE (run_id, answered_by);
ALTER TABLE inputs ADD CONSTRAINT inputs_given_by_a_request CHECK (status = 'pending' OR answered_by IS NOT NULL) NOT VALID;
COMMENT ON COLUMN inputs.answered_by IS
    'I18: the request that gave this input (a2a:<token>:<messageId>, key:<token>:<Idempotency-Key>, '
    'question:<token>:<question id>), unique per run: the same request again finds this question and changes nothing.';
