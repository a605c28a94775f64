-- The simulated user's own faults, as the review of its turns found them when the session ended
-- (a JSON list of `{seq, rule, detail}`); NULL when it has none, or the session had no
-- reviewed user. A trainer leaves such a session out of its loss, and metrics out of rewards.
ALTER TABLE sessions ADD COLUMN user_faults TEXT;
