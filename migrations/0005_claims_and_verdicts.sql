-- One driver per session, and judge verdicts kept for re-scoring.

-- Who drives an unfinished session: an owner's id, until when its lease holds (milliseconds
-- since the Unix epoch, by the database's clock, so owners on machines whose clocks differ agree),
-- and a fence raised by every claim. A write carries the fence of the claim it was made under,
-- and is refused once the session's fence has moved on. Unclaimed: owner NULL. A finished
-- session is released (owner NULL) and keeps its last fence.
ALTER TABLE sessions ADD COLUMN owner TEXT;
ALTER TABLE sessions ADD COLUMN lease_until INTEGER;
ALTER TABLE sessions ADD COLUMN fence INTEGER NOT NULL DEFAULT 0;
-- Renewal and release find an owner's sessions without reading the run.
CREATE INDEX sessions_by_owner ON sessions (owner) WHERE owner IS NOT NULL;

-- A judge's answers, keyed by the SHA-256 of its request (model, messages, tools, sampling and
-- response format), so that re-scoring with an unchanged prompt reuses the verdict instead of
-- asking the judge again.
CREATE TABLE judge_verdicts (
    request_hash TEXT PRIMARY KEY,
    model        TEXT NOT NULL,
    -- The reply as JSON: the message, the finish reason and the call's record (bodies, usage).
    reply        TEXT NOT NULL,
    created_at   TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
) WITHOUT ROWID;
