-- The feed of events in commit order reads events by rowid, which grows in
-- commit order under SQLite's single writer: nothing to add. This migration
-- keeps the two schemas' versions in step.
SELECT 1;
