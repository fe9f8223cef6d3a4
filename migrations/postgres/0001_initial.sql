-- The conversion gateway's tables on PostgreSQL.
--
-- They are created in the first schema of the connection's search_path: a
-- host sharing a database with other software gives the store a schema of
-- its own. Hashes of secrets are 32-byte BYTEA (the plaintext is never
-- stored); instants are TIMESTAMPTZ (microseconds).
-- Every lookup the store makes goes through a primary key or an index below.

CREATE TABLE grants (
    id          UUID        PRIMARY KEY,
    client_id   TEXT        NOT NULL,
    account_id  UUID        NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    revoked_at  TIMESTAMPTZ
);

-- A taken code stays as a tombstone (taken) so that a replay can be told
-- from an unknown code and its grant revoked (RFC 6749 section 4.1.2).
CREATE TABLE authorization_codes (
    hash            BYTEA       PRIMARY KEY,
    grant_id        UUID        NOT NULL,
    client_id       TEXT        NOT NULL,
    account_id      UUID        NOT NULL,
    redirect_uri    TEXT        NOT NULL,
    pkce_challenge  TEXT,
    issued_at       TIMESTAMPTZ NOT NULL,
    expires_at      TIMESTAMPTZ NOT NULL,
    taken           BOOLEAN     NOT NULL DEFAULT FALSE
);

CREATE TABLE access_tokens (
    hash        BYTEA       PRIMARY KEY,
    grant_id    UUID        NOT NULL,
    client_id   TEXT        NOT NULL,
    account_id  UUID        NOT NULL,
    issued_at   TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ NOT NULL
);

-- A rotated token stays as a tombstone naming its successor (RFC 9700
-- section 4.14), so reuse of the grant can be detected.
CREATE TABLE refresh_tokens (
    hash        BYTEA       PRIMARY KEY,
    grant_id    UUID        NOT NULL,
    client_id   TEXT        NOT NULL,
    account_id  UUID        NOT NULL,
    issued_at   TIMESTAMPTZ NOT NULL,
    expires_at  TIMESTAMPTZ,
    rotated_at  TIMESTAMPTZ,
    successor   BYTEA,
    CHECK ((rotated_at IS NULL) = (successor IS NULL))
);

CREATE TABLE clients (
    id             TEXT    PRIMARY KEY,
    name           TEXT    NOT NULL,
    secret_hash    BYTEA   NOT NULL,
    redirect_uris  TEXT[]  NOT NULL,
    require_pkce   BOOLEAN NOT NULL
);

CREATE TABLE accounts (
    id             UUID   PRIMARY KEY,
    name           TEXT   NOT NULL,
    email          TEXT   NOT NULL UNIQUE,
    password_hash  TEXT,
    custom_fields  TEXT[] NOT NULL
);

CREATE TABLE api_keys (
    id          UUID        PRIMARY KEY,
    account_id  UUID        NOT NULL,
    hash        BYTEA       NOT NULL UNIQUE,
    label       TEXT        NOT NULL,
    active      BOOLEAN     NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL,
    -- Insertion order, to list keys created in the same microsecond stably.
    seq         BIGINT      GENERATED ALWAYS AS IDENTITY
);
-- Counting an account's keys (the per-account limit) and listing them.
CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at, seq);

CREATE TABLE events (
    event_uuid             UUID        PRIMARY KEY,
    account_id             UUID        NOT NULL,
    received_at            TIMESTAMPTZ NOT NULL,
    event_type             TEXT        NOT NULL,
    event_family           TEXT        NOT NULL,
    conversion_identifier  TEXT        NOT NULL,
    email                  TEXT        NOT NULL,
    payload                JSONB       NOT NULL,
    channel                JSONB       NOT NULL,
    batch_uuid             UUID
);
-- An account's events in time order, for exports and housekeeping.
CREATE INDEX events_by_account ON events (account_id, received_at);

-- One claim per account and key; an expired claim is overwritten by the next
-- request that uses the key.
CREATE TABLE idempotency_claims (
    account_id   UUID        NOT NULL,
    key          TEXT        NOT NULL,
    fingerprint  BYTEA       NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ NOT NULL,
    event_uuids  UUID[]      NOT NULL,
    batch_uuid   UUID,
    PRIMARY KEY (account_id, key)
);
