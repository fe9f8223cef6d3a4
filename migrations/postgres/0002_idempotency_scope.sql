-- Idempotency keys are claimed per credential (an API key, or an
-- application's bearer tokens), not per account: the API key of a website
-- form is public, and must not be able to claim an application's keys.
--
-- Claims made before this migration keep the scope '' that no credential
-- has: they are forgotten (they expire within a day anyway).

ALTER TABLE idempotency_claims ADD COLUMN scope TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency_claims ALTER COLUMN scope DROP DEFAULT;
ALTER TABLE idempotency_claims DROP CONSTRAINT idempotency_claims_pkey;
ALTER TABLE idempotency_claims ADD PRIMARY KEY (account_id, scope, key);
