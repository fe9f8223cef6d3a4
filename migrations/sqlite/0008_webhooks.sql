-- Webhooks: the registrations, the dispatcher's cursor in the event feed,
-- the outbox of deliveries and the last attempts of each webhook
-- (src/store/webhooks.rs says why deliveries are taken from the feed).
--
-- Conventions as in 0001: uuids as hyphenated TEXT, instants as INTEGER
-- microseconds since the Unix epoch, lists as TEXT holding a JSON array.

CREATE TABLE webhooks (
    id                 TEXT    PRIMARY KEY NOT NULL,
    account_id         TEXT    NOT NULL,
    client_id          TEXT    NOT NULL,
    event_type         TEXT    NOT NULL,
    url                TEXT    NOT NULL,
    -- JSON arrays: the conversion identifiers delivered (empty: all), and
    -- the relations by their wire names ("COMPANY").
    event_identifiers  TEXT    NOT NULL,
    include_relations  TEXT    NOT NULL,
    status             TEXT    NOT NULL CHECK (status IN ('active', 'inactive')),
    created_at         INTEGER NOT NULL,
    updated_at         INTEGER NOT NULL,
    secret_salt        BLOB    NOT NULL CHECK (length(secret_salt) = 16),
    failing_since      INTEGER
);
-- One URL per account and event type, however many callers race: the
-- store answers a violation with `WebhookWrite::DuplicateUrl`. Also lists
-- an account's webhooks.
CREATE UNIQUE INDEX webhooks_url_unique ON webhooks (account_id, event_type, url);

-- The dispatcher's one cursor in the event feed, moved by compare-and-set
-- with the deliveries of the page it passes. '' is the feed's start.
CREATE TABLE webhook_dispatch (
    id           INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    feed_cursor  TEXT    NOT NULL
);
INSERT INTO webhook_dispatch (id, feed_cursor) VALUES (1, '');

-- The outbox. `number` is the dispatch order (AUTOINCREMENT: never reused,
-- even once the largest is purged), which orders the deliveries of one
-- contact to one webhook.
CREATE TABLE webhook_deliveries (
    number           INTEGER PRIMARY KEY AUTOINCREMENT,
    id               TEXT    NOT NULL UNIQUE,
    webhook_id       TEXT    NOT NULL,
    event_uuid       TEXT    NOT NULL,
    contact_key      TEXT    NOT NULL,
    body             TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER NOT NULL,
    leased_until     INTEGER,
    finished_at      INTEGER
);
-- The lease: pending deliveries, oldest due first ...
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at, number)
    WHERE state = 'pending';
-- ... each only if no earlier delivery of its contact to its webhook is
-- pending.
CREATE INDEX webhook_deliveries_by_contact
    ON webhook_deliveries (webhook_id, contact_key, number)
    WHERE state = 'pending';
-- Deleting a webhook's deliveries.
CREATE INDEX webhook_deliveries_by_webhook ON webhook_deliveries (webhook_id);
-- The purge of ended deliveries.
CREATE INDEX webhook_deliveries_ended ON webhook_deliveries (finished_at)
    WHERE finished_at IS NOT NULL;

-- The last attempts of each webhook (at most 20 are kept); `id` is the
-- order they were recorded in, newest last.
CREATE TABLE webhook_attempts (
    id           INTEGER PRIMARY KEY,
    delivery_id  TEXT    NOT NULL,
    webhook_id   TEXT    NOT NULL,
    at           INTEGER NOT NULL,
    status       INTEGER,
    error        TEXT,
    duration_ms  INTEGER NOT NULL
);
CREATE INDEX webhook_attempts_by_webhook ON webhook_attempts (webhook_id, id);
