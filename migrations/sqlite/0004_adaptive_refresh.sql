-- The adaptive refresh policy tells a grant's first refresh token (issued
-- by a code exchange) from its successors, and reads whether a token's
-- successor was used; applications may carry a refresh policy of their own.

ALTER TABLE refresh_tokens ADD COLUMN predecessor BLOB;
-- Tokens issued by a refresh so far are the successor of another: name it.
-- The index makes the look-up per row cheap; it is not needed afterwards.
CREATE INDEX refresh_tokens_by_successor ON refresh_tokens (successor);
UPDATE refresh_tokens SET predecessor =
    (SELECT p.hash FROM refresh_tokens p WHERE p.successor = refresh_tokens.hash);
DROP INDEX refresh_tokens_by_successor;

-- NULL: the gateway's policy. Otherwise `adaptive:SECONDS`, `rotate:SECONDS`
-- or `reuse`.
ALTER TABLE clients ADD COLUMN refresh_policy TEXT;
