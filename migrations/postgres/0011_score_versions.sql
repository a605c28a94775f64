-- What each score version of a run was scored with, as `parley rescore` was given it: the
-- reward's settings (JSON: its components, min and max) and when. Version 1, the scores recorded
-- as the run's sessions finished, has no row here: its reward is the run's own settings'.
CREATE TABLE score_versions (
    run_id     BIGINT NOT NULL REFERENCES runs (id),
    version    BIGINT NOT NULL,
    reward     TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
    PRIMARY KEY (run_id, version)
);
