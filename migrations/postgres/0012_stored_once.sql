-- What many rows say alike, stored once, under an id made from its text (the first eight bytes
-- of its SHA-256).
--
-- Tool lists: a task file repeats its tool list on every row (NeMo Gym rows carry it in
-- `responses_create_params.tools`), often half of the row's bytes, and most files offer every row
-- the same list. A run keeps each list once, and a row of `tasks` that leaves its list out names
-- it in `tools`; reading the row puts the list back. Rows stored before keep their lists (`tools`
-- NULL).

CREATE TABLE task_tools (
    run_id BIGINT NOT NULL REFERENCES runs (id),
    id     BIGINT NOT NULL,
    -- The list as JSON, as it was in the rows that share it.
    tools  TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
);

ALTER TABLE tasks ADD COLUMN tools BIGINT;

-- System prompts: a run's sessions open with a few prompts between them, often kilobytes each. A
-- long system message's row leaves its text to `texts` and names it in `content_id`.
CREATE TABLE texts (
    id   BIGINT PRIMARY KEY,
    text TEXT NOT NULL
);

ALTER TABLE messages ADD COLUMN content_id BIGINT;
