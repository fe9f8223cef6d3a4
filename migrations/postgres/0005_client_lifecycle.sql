-- Client lifecycle: an application can be switched off, and keeps its
-- previous secret for an overlap after a rotation. Grants record when they
-- were last refreshed, for the account's list of connected applications.

ALTER TABLE clients ADD COLUMN active BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE clients ADD COLUMN previous_secret_hash BYTEA;
ALTER TABLE clients ADD COLUMN previous_secret_valid_until TIMESTAMPTZ;

ALTER TABLE grants ADD COLUMN last_refreshed_at TIMESTAMPTZ;
-- An account's grants, for its list of connected applications.
CREATE INDEX grants_by_account ON grants (account_id, created_at);
