-- Client lifecycle: an application can be switched off, and keeps its
-- previous secret for an overlap after a rotation. Grants record when they
-- were last refreshed, for the account's list of connected applications.

ALTER TABLE clients ADD COLUMN active INTEGER NOT NULL DEFAULT 1;
ALTER TABLE clients ADD COLUMN previous_secret_hash BLOB;
ALTER TABLE clients ADD COLUMN previous_secret_valid_until INTEGER;

ALTER TABLE grants ADD COLUMN last_refreshed_at INTEGER;
-- An account's grants, for its list of connected applications.
CREATE INDEX grants_by_account ON grants (account_id, created_at);
