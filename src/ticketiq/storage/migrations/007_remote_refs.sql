-- beside: previous
-- A call to a remote A2A agent is found again by the task id the agent gave it, recorded the moment
-- the agent named it (I9): a resume reads such a call back by GetTask and never sends it again.
ALTER TABLE calls ADD COLUMN remote_ref text;
COMMENT ON COLUMN calls.remote_ref IS
    'What a call in doubt can be found again by at its vendor: a remote agent''s task id, recorded by '
    'the attempt that marked the call as soon as the agent answered the send. NULL: nothing recorded '
    '(a remote agent''s call in doubt without it is settled unknown, never sent again).';
