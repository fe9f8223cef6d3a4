-- The conversion gateway's tables on SQLite.
--
-- Conventions: identifiers (uuids) are TEXT in their hyphenated form; hashes
-- of secrets are 32-byte BLOBs (the plaintext is never stored); instants are
-- INTEGER microseconds since the Unix epoch, UTC, so that they sort and
-- compare as numbers; lists are TEXT holding a JSON array.
-- Every lookup the store makes goes through a primary key or an index below.

CREATE TABLE grants (
    id          TEXT    PRIMARY KEY NOT NULL,
    client_id   TEXT    NOT NULL,
    account_id  TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);

-- A taken code stays as a tombstone (taken = 1) so that a replay can be told
-- from an unknown code and its grant revoked (RFC 6749 section 4.1.2).
CREATE TABLE authorization_codes (
    hash            BLOB    PRIMARY KEY NOT NULL,
    grant_id        TEXT    NOT NULL,
    client_id       TEXT    NOT NULL,
    account_id      TEXT    NOT NULL,
    redirect_uri    TEXT    NOT NULL,
    pkce_challenge  TEXT,
    issued_at       INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    taken           INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE access_tokens (
    hash        BLOB    PRIMARY KEY NOT NULL,
    grant_id    TEXT    NOT NULL,
    client_id   TEXT    NOT NULL,
    account_id  TEXT    NOT NULL,
    issued_at   INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

-- A rotated token stays as a tombstone naming its successor (RFC 9700
-- section 4.14), so reuse of the grant can be detected.
CREATE TABLE refresh_tokens (
    hash        BLOB    PRIMARY KEY NOT NULL,
    grant_id    TEXT    NOT NULL,
    client_id   TEXT    NOT NULL,
    account_id  TEXT    NOT NULL,
    issued_at   INTEGER NOT NULL,
    expires_at  INTEGER,
    rotated_at  INTEGER,
    successor   BLOB,
    CHECK ((rotated_at IS NULL) = (successor IS NULL))
);

CREATE TABLE clients (
    id             TEXT    PRIMARY KEY NOT NULL,
    name           TEXT    NOT NULL,
    secret_hash    BLOB    NOT NULL,
    redirect_uris  TEXT    NOT NULL,
    require_pkce   INTEGER NOT NULL
);

CREATE TABLE accounts (
    id             TEXT PRIMARY KEY NOT NULL,
    name           TEXT NOT NULL,
    email          TEXT NOT NULL UNIQUE,
    password_hash  TEXT,
    custom_fields  TEXT NOT NULL
);

CREATE TABLE api_keys (
    id          TEXT    PRIMARY KEY NOT NULL,
    account_id  TEXT    NOT NULL,
    hash        BLOB    NOT NULL UNIQUE,
    label       TEXT    NOT NULL,
    active      INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
-- Counting an account's keys (the per-account limit) and listing them.
CREATE INDEX api_keys_by_account ON api_keys (account_id, created_at);

CREATE TABLE events (
    event_uuid             TEXT    PRIMARY KEY NOT NULL,
    account_id             TEXT    NOT NULL,
    received_at            INTEGER NOT NULL,
    event_type             TEXT    NOT NULL,
    event_family           TEXT    NOT NULL,
    conversion_identifier  TEXT    NOT NULL,
    email                  TEXT    NOT NULL,
    payload                TEXT    NOT NULL,
    channel                TEXT    NOT NULL,
    batch_uuid             TEXT
);
-- An account's events in time order, for exports and housekeeping.
CREATE INDEX events_by_account ON events (account_id, received_at);

-- One claim per account and key; an expired claim is overwritten by the next
-- request that uses the key.
CREATE TABLE idempotency_claims (
    account_id   TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    fingerprint  BLOB    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    event_uuids  TEXT    NOT NULL,
    batch_uuid   TEXT,
    PRIMARY KEY (account_id, key)
);
