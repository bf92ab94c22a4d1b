-- Admin sessions ended by logout before they expire. The session cookie is signed and
-- stateless (it survives restarts and works on every API replica), so without this list a
-- copied cookie kept working for its full lifetime after its owner logged out. A row lives
-- until the cookie would have expired anyway; logging out prunes the expired ones.
-- Additive only: older code ignores the table (and keeps honouring revoked cookies).
CREATE TABLE admin_session_revocations (
    session_id  text PRIMARY KEY,            -- the cookie's nonce (random, 128 bits)
    expires_at  timestamptz NOT NULL,        -- when the cookie expires by itself
    revoked_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX admin_session_revocations_expires_at ON admin_session_revocations (expires_at);
