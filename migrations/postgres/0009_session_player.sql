-- Who plays a session's agent: NULL for the run's own agent, 'trainer' for an OpenEnv trainer
-- acting step by step, 'row_policy' for the policy URL a served row named for itself. A resume
-- or a worker never continues a session another policy plays: one trajectory, one policy.
ALTER TABLE sessions ADD COLUMN player TEXT;
