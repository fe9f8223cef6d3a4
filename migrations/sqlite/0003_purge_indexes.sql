-- Indexes for the purge of what stopped being usable (expired codes and
-- access tokens, rotated or expired refresh tokens, the refresh tokens of
-- revoked grants, expired idempotency claims), so that each of its bounded
-- DELETEs finds its rows without scanning a table.

CREATE INDEX authorization_codes_by_expiry ON authorization_codes (expires_at);
CREATE INDEX access_tokens_by_expiry ON access_tokens (expires_at);
CREATE INDEX refresh_tokens_by_rotation ON refresh_tokens (rotated_at)
    WHERE rotated_at IS NOT NULL;
CREATE INDEX refresh_tokens_by_expiry ON refresh_tokens (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX refresh_tokens_by_grant ON refresh_tokens (grant_id);
CREATE INDEX grants_by_revocation ON grants (revoked_at)
    WHERE revoked_at IS NOT NULL;
CREATE INDEX idempotency_claims_by_expiry ON idempotency_claims (expires_at);
