-- Messages as models write them. `parts` holds the content of a message written as a list of
-- parts (text, images, audio, and parts of unknown types kept as given), as Parley's JSON list
-- of `Part`s; `content` is then NULL. `reasoning` holds an assistant's reasoning as JSON:
-- `{"text", "spelling", "items"?}`, where `items` are a Responses provider's reasoning items kept
-- exactly (their `encrypted_content` included). Both are NULL for a plain text message, so rows
-- written before this migration read as they always did.
ALTER TABLE messages ADD COLUMN parts TEXT;
ALTER TABLE messages ADD COLUMN reasoning TEXT;
