-- The turn tables' keys to `sessions` are kept by the writer, not by per-row triggers.
--
-- A batch of turns is one statement that locks its sessions' rows and inserts only rows of the
-- sessions it locked under the right fence (crates/parley-store/src/pg/writer.rs); a fork copies
-- rows of a session it has just created, in the same transaction; nothing deletes a session. The
-- foreign keys checked each inserted row again, one query per row (a fifth of the server's CPU
-- per rollout), for no case the writer leaves open. A PostgreSQL-only change: SQLite checks the
-- same keys for little cost, and its migrations skip this number.
ALTER TABLE messages DROP CONSTRAINT messages_session_id_fkey;
ALTER TABLE model_calls DROP CONSTRAINT model_calls_session_id_fkey;
ALTER TABLE tool_calls DROP CONSTRAINT tool_calls_session_id_fkey;
ALTER TABLE scores DROP CONSTRAINT scores_session_id_fkey;
