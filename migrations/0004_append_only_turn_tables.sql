-- The turn tables become rowid tables. Keyed by (session_id, seq) and WITHOUT ROWID, every batch
-- of turns landed in as many places of the table as sessions were in flight, and a model call's
-- raw bodies (often over a kilobyte) spilled into overflow pages; as rowid tables each batch is
-- appended at the table's end, and only the small (session_id, seq) index is written in place.
-- Columns, keys and constraints are unchanged.

CREATE TABLE messages_new (
    session_id   INTEGER NOT NULL REFERENCES sessions (id),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT,
    -- JSON list of {id, name, arguments}, or NULL.
    tool_calls   TEXT,
    tool_call_id TEXT,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO messages_new SELECT session_id, seq, role, content, tool_calls, tool_call_id FROM messages;
DROP TABLE messages;
ALTER TABLE messages_new RENAME TO messages;

-- One row per model call, keyed by the message it produced (or would have produced, on failure).
CREATE TABLE model_calls_new (
    session_id        INTEGER NOT NULL REFERENCES sessions (id),
    seq               INTEGER NOT NULL,
    endpoint          TEXT NOT NULL,
    -- Raw request and response bodies. Bodies never hold keys: those travel in headers only.
    request           TEXT,
    response          TEXT,
    prompt_tokens     INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    latency_ms        REAL NOT NULL,
    attempts          INTEGER NOT NULL,
    error             TEXT,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO model_calls_new
SELECT session_id, seq, endpoint, request, response, prompt_tokens, completion_tokens, latency_ms, attempts, error
FROM model_calls;
DROP TABLE model_calls;
ALTER TABLE model_calls_new RENAME TO model_calls;

-- One row per tool call, keyed by the tool message that carries its output.
CREATE TABLE tool_calls_new (
    session_id  INTEGER NOT NULL REFERENCES sessions (id),
    seq         INTEGER NOT NULL,
    -- 'agent', or 'user' for the user's own calls in dual control.
    party       TEXT NOT NULL,
    call_id     TEXT NOT NULL,
    name        TEXT NOT NULL,
    arguments   TEXT NOT NULL,
    output      TEXT NOT NULL,
    is_error    INTEGER NOT NULL,
    is_write    INTEGER NOT NULL,
    -- The model wrote a call that could not run: arguments not JSON, an unknown tool, a schema violation.
    malformed   INTEGER NOT NULL,
    duration_us INTEGER NOT NULL,
    -- The output was longer than the run's --max-tool-output and was cut off.
    truncated   INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (session_id, seq)
);
INSERT INTO tool_calls_new
SELECT session_id, seq, party, call_id, name, arguments, output, is_error, is_write, malformed, duration_us, truncated
FROM tool_calls;
DROP TABLE tool_calls;
ALTER TABLE tool_calls_new RENAME TO tool_calls;
