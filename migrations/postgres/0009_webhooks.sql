-- Webhooks: the registrations, the dispatcher's cursor in the event feed,
-- the outbox of deliveries and the last attempts of each webhook
-- (src/store/webhooks.rs says why deliveries are taken from the feed).

CREATE TABLE webhooks (
    id                 UUID        PRIMARY KEY,
    account_id         UUID        NOT NULL,
    client_id          TEXT        NOT NULL,
    event_type         TEXT        NOT NULL,
    url                TEXT        NOT NULL,
    -- JSON arrays as text: the conversion identifiers delivered (empty:
    -- all), and the relations by their wire names ("COMPANY").
    event_identifiers  TEXT        NOT NULL,
    include_relations  TEXT        NOT NULL,
    status             TEXT        NOT NULL CHECK (status IN ('active', 'inactive')),
    created_at         TIMESTAMPTZ NOT NULL,
    updated_at         TIMESTAMPTZ NOT NULL,
    secret_salt        BYTEA       NOT NULL CHECK (octet_length(secret_salt) = 16),
    failing_since      TIMESTAMPTZ,
    -- Registration order, for listing oldest first.
    seq                BIGINT      GENERATED ALWAYS AS IDENTITY
);
-- One URL per account and event type, however many instances race: the
-- store answers a violation with `WebhookWrite::DuplicateUrl`. Also lists
-- an account's webhooks.
CREATE UNIQUE INDEX webhooks_url_unique ON webhooks (account_id, event_type, url);

-- The dispatcher's one cursor in the event feed, moved by compare-and-set
-- (`UPDATE ... WHERE feed_cursor = $from`) in the transaction that records
-- the deliveries of the page it passes. '' is the feed's start.
CREATE TABLE webhook_dispatch (
    id           SMALLINT PRIMARY KEY CHECK (id = 1),
    feed_cursor  TEXT     NOT NULL
);
INSERT INTO webhook_dispatch (id, feed_cursor) VALUES (1, '');

-- The outbox. `number` is the dispatch order, which orders the deliveries
-- of one contact to one webhook: numbers are drawn while the dispatch holds
-- the cursor's row lock, so they grow in commit order too.
CREATE TABLE webhook_deliveries (
    number           BIGSERIAL   PRIMARY KEY,
    id               UUID        NOT NULL UNIQUE,
    webhook_id       UUID        NOT NULL,
    event_uuid       UUID        NOT NULL,
    contact_key      TEXT        NOT NULL,
    body             TEXT        NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL,
    state            TEXT        NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         BIGINT      NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL,
    leased_until     TIMESTAMPTZ,
    finished_at      TIMESTAMPTZ
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
    id           BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    delivery_id  UUID        NOT NULL,
    webhook_id   UUID        NOT NULL,
    at           TIMESTAMPTZ NOT NULL,
    status       BIGINT,
    error        TEXT,
    duration_ms  BIGINT      NOT NULL
);
CREATE INDEX webhook_attempts_by_webhook ON webhook_attempts (webhook_id, id);
