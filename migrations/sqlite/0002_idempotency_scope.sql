-- Idempotency keys are claimed per credential (an API key, or an
-- application's bearer tokens), not per account: the API key of a website
-- form is public, and must not be able to claim an application's keys.
--
-- SQLite cannot change a primary key in place, so the table is rebuilt.
-- Claims made before this migration keep the scope '' that no credential
-- has: they are forgotten (they expire within a day anyway).

CREATE TABLE idempotency_claims_scoped (
    account_id   TEXT    NOT NULL,
    scope        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    event_uuids  TEXT    NOT NULL,
    batch_uuid   TEXT,
    PRIMARY KEY (account_id, scope, key)
);
INSERT INTO idempotency_claims_scoped
    (account_id, scope, key, fingerprint, created_at, expires_at, event_uuids, batch_uuid)
SELECT account_id, '', key, fingerprint, created_at, expires_at, event_uuids, batch_uuid
FROM idempotency_claims;
DROP TABLE idempotency_claims;
ALTER TABLE idempotency_claims_scoped RENAME TO idempotency_claims;
