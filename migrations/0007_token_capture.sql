-- Token capture for RL training. `messages.tokens` holds the token ids and log-probs a
-- token-capturing policy generated an assistant message with, as JSON under the names trainers
-- read: `{"prompt_token_ids", "generation_token_ids", "generation_log_probs"}`; NULL otherwise.
-- A model call and the message it produced share their (session_id, seq).
ALTER TABLE messages ADD COLUMN tokens TEXT;
-- Per model call: which party made it ('agent' or 'user'; a judge's calls are kept in
-- `judge_verdicts`), why the model stopped, and the sampling settings the request carried (JSON).
ALTER TABLE model_calls ADD COLUMN party TEXT;
ALTER TABLE model_calls ADD COLUMN finish_reason TEXT;
ALTER TABLE model_calls ADD COLUMN sampling TEXT;
-- Why a session's token ids are not one contiguous sequence (the first assistant message whose
-- prompt does not begin with every token before it), as a trainer would refuse the batch; NULL
-- when they are, or when the session has none.
ALTER TABLE sessions ADD COLUMN token_contiguity TEXT;
