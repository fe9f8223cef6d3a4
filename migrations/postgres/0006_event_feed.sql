-- The feed of events in commit order. A sequence alone cannot give it:
-- numbers are drawn when a row is inserted, so a transaction that drew a
-- smaller number can commit after one that drew a larger, behind a reader's
-- cursor. Each event keeps the id of the transaction that wrote it; a
-- reader orders by (tx_id, feed_seq) and reads only transactions older than
-- every one still running (pg_snapshot_xmin), which can no longer change.
ALTER TABLE events ADD COLUMN tx_id xid8 NOT NULL DEFAULT pg_current_xact_id();
ALTER TABLE events ADD COLUMN feed_seq BIGSERIAL;
CREATE INDEX events_feed ON events (tx_id, feed_seq);
