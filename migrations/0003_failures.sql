-- Failures are classified, retries counted, and cut-off tool outputs marked.

-- Why a session failed for a reason outside the agent (rate_limited, server_error, timeout,
-- connection, malformed_response, environment_error, ...), or NULL.
ALTER TABLE sessions ADD COLUMN failure TEXT;
-- Model-call attempts beyond the first, the failed call's included.
ALTER TABLE sessions ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
-- The output was longer than the run's --max-tool-output and was cut off.
ALTER TABLE tool_calls ADD COLUMN truncated INTEGER NOT NULL DEFAULT 0;
