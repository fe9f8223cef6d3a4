-- Drops the index of events by account and time. Nothing in the crate reads
-- events that way (events are read by uuid, through the primary key, and in
-- feed order), and every index on the intake path costs each insert: with
-- it gone, an intake flood measured 7% (PostgreSQL) and 13% (SQLite) more
-- conversions per second (README, "Intake over HTTP"). A host that queries
-- events by account creates it again after upgrading:
--   CREATE INDEX events_by_account ON events (account_id, received_at);
DROP INDEX IF EXISTS events_by_account;
