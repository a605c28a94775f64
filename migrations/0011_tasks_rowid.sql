-- The tasks table becomes a rowid table. WITHOUT ROWID, a row is kept in an index b-tree, whose
-- cells hold at most about 1,000 bytes of a 4 KiB page before the rest spills into an overflow
-- page of its own: a 2 KB task row took a leaf cell and a three-quarters empty overflow page,
-- about 4.7 KB on disk, more than the rollout's whole JSONL line. A rowid table keeps rows of up
-- to 4 KB in its leaves, packed. Columns, key and constraints are unchanged.

CREATE TABLE tasks_new (
    run_id     INTEGER NOT NULL REFERENCES runs (id),
    task_index INTEGER NOT NULL,
    task_id    TEXT NOT NULL,
    -- The task row as it was read (NeMo Gym JSONL row, or the environment's own task JSON).
    row        TEXT NOT NULL,
    PRIMARY KEY (run_id, task_index)
);
INSERT INTO tasks_new SELECT run_id, task_index, task_id, row FROM tasks ORDER BY run_id, task_index;
DROP TABLE tasks;
ALTER TABLE tasks_new RENAME TO tasks;
