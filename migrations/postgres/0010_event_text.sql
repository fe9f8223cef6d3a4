-- Events keep their payload and channel as plain `text`, no longer as
-- `json`. Nothing queries inside them; the service writes only JSON it has
-- produced itself (the payload as the validator wrote it, the channel as
-- serde wrote it) and parses both again when it reads an event back, so a
-- row that is not JSON is still reported, as malformed. What this saves is
-- PostgreSQL's own parse of every payload on receipt (`json_in`): measured
-- side by side under an intake flood, PostgreSQL's CPU went from 25.0 to
-- 22.4 µs an event and the store took 6% more events a second
-- (benches/intake_load/NOTES.md, "the payload as text"). A host that
-- queries inside an event casts: `payload::json ->> 'email'`.
-- The table is rewritten once, under an exclusive lock (PostgreSQL converts
-- json to text through its text form, not in place). Instances of an
-- earlier release still running against the database read these columns
-- as `json`, which the new type refuses, until they are replaced: stop or
-- restart them when the first instance of this release has started.
ALTER TABLE events
    ALTER COLUMN payload TYPE text,
    ALTER COLUMN channel TYPE text;
