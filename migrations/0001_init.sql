-- Parley's session store. Every turn of every session is committed before the next one starts.

CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    created_at  TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    environment TEXT NOT NULL,
    -- The resolved configuration as JSON. API keys are named here, never stored.
    config      TEXT NOT NULL,
    status      TEXT NOT NULL DEFAULT 'running',
    finished_at TEXT
);

CREATE TABLE tasks (
    run_id     INTEGER NOT NULL REFERENCES runs (id),
    task_index INTEGER NOT NULL,
    task_id    TEXT NOT NULL,
    -- The task row as it was read (NeMo Gym JSONL row, or the environment's own task JSON).
    row        TEXT NOT NULL,
    PRIMARY KEY (run_id, task_index)
) WITHOUT ROWID;

CREATE TABLE sessions (
    id          INTEGER PRIMARY KEY,
    run_id      INTEGER NOT NULL REFERENCES runs (id),
    task_index  INTEGER NOT NULL,
    trial       INTEGER NOT NULL,
    seed        INTEGER NOT NULL,
    attempt     INTEGER NOT NULL DEFAULT 0,
    -- 'pending' until the session ends, then 'finished'.
    status      TEXT NOT NULL DEFAULT 'pending',
    termination TEXT,
    reward      REAL,
    error       TEXT,
    steps       INTEGER,
    duration_ms REAL,
    finished_at TEXT,
    -- A fork shares the first `fork_at` messages of `forked_from` and continues from there.
    forked_from INTEGER REFERENCES sessions (id),
    fork_at     INTEGER,
    UNIQUE (run_id, task_index, trial)
);

CREATE TABLE messages (
    session_id   INTEGER NOT NULL REFERENCES sessions (id),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT,
    -- JSON list of {id, name, arguments}, or NULL.
    tool_calls   TEXT,
    tool_call_id TEXT,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- One row per model call, keyed by the message it produced (or would have produced, on failure).
CREATE TABLE model_calls (
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
) WITHOUT ROWID;

-- One row per tool call, keyed by the tool message that carries its output.
CREATE TABLE tool_calls (
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
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

-- Scores of finished sessions; a re-score adds a version beside the old ones.
CREATE TABLE scores (
    session_id INTEGER NOT NULL REFERENCES sessions (id),
    scorer     TEXT NOT NULL,
    version    INTEGER NOT NULL,
    value      REAL NOT NULL,
    breakdown  TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    PRIMARY KEY (session_id, scorer, version)
) WITHOUT ROWID;

CREATE INDEX sessions_by_run ON sessions (run_id, status);
