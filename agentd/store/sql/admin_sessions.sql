-- name: admin_session_revoke :exec
-- Admin logout: end the session for every replica; no fence (revoking twice is a no-op).
-- $1 session_id text · $2 expires_at timestamptz
INSERT INTO admin_session_revocations (session_id, expires_at) VALUES ($1, $2)
ON CONFLICT (session_id) DO NOTHING;

-- name: admin_session_prune :exec
-- Admin logout, after revoking: drop revocations of cookies that have expired by now.
DELETE FROM admin_session_revocations WHERE expires_at < now();

-- name: admin_session_is_revoked :val
-- Every admin request made with a session cookie; no fence.
-- $1 session_id text
SELECT EXISTS (SELECT 1 FROM admin_session_revocations WHERE session_id = $1);
