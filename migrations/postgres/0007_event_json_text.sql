-- Events keep their payload and channel as JSON text (json), no longer as
-- jsonb. Nothing queries inside them, the payload is kept exactly as the
-- validator wrote it, and PostgreSQL still checks that each is JSON; but it
-- no longer builds a jsonb tree of every payload, which took a quarter of
-- its time under an intake flood (profiled; README, "Intake over HTTP").
-- The table is rewritten once, under an exclusive lock. Instances of an
-- earlier release still running against the database keep prepared reads
-- of the old column types, and PostgreSQL refuses those ("cached plan must
-- not change result type") until their connections are replaced: stop or
-- restart them when the first instance of this release has started.
ALTER TABLE events
    ALTER COLUMN payload TYPE json USING payload::json,
    ALTER COLUMN channel TYPE json USING channel::json;
