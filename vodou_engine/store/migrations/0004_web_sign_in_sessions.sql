-- Run store schema, version 4: what `recipe serve`'s web inbox keeps (web/).
--
-- Additive only (docs/store-schema.md): new tables, nothing else changes.
-- No secret is kept in a form that can be used: a sign-in link's token and a
-- session's id are stored as their sha256, as the approvers' secrets are.

-- One-time sign-in links (`recipe approver add NAME` prints one). Using one
-- is a compare-and-set on `used_at`, so a link signs in at most one browser.
CREATE TABLE web_links (
    token_sha256 TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    created_by   TEXT NOT NULL,
    expires_at   DOUBLE PRECISION NOT NULL,
    used_at      DOUBLE PRECISION
);

-- Signed-in browsers. The cookie holds the session id (signed); the store
-- holds only its sha256, so reading the store does not let anyone sign in.
CREATE TABLE web_sessions (
    id_sha256  TEXT PRIMARY KEY,
    name       TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    ended_at   DOUBLE PRECISION,
    link_sha256 TEXT,
    user_agent TEXT
);
CREATE INDEX web_sessions_by_name ON web_sessions (name);

-- The key cookies and form tokens are signed with, made once per store so
-- every `recipe serve` on the same store accepts the same sessions.
CREATE TABLE web_keys (
    name       TEXT PRIMARY KEY,
    secret     TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
