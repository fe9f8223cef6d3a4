-- The adaptive refresh policy tells a grant's first refresh token (issued
-- by a code exchange) from its successors, and reads whether a token's
-- successor was used; applications may carry a refresh policy of their own.

ALTER TABLE refresh_tokens ADD COLUMN predecessor BYTEA;
-- Tokens issued by a refresh so far are the successor of another: name it.
UPDATE refresh_tokens AS r SET predecessor = p.hash
FROM refresh_tokens AS p
WHERE p.successor = r.hash;

-- NULL: the gateway's policy. Otherwise `adaptive:SECONDS`, `rotate:SECONDS`
-- or `reuse`.
ALTER TABLE clients ADD COLUMN refresh_policy TEXT;
