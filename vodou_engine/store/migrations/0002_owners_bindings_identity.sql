-- Run store schema, version 2: who drives a run, which servers it is bound to,
-- when each node became ready, who may act, and an audit log that needs no run.
--
-- Additive only (docs/store-schema.md): nullable columns or columns with a
-- default, and new tables, so runs parked by version 1 still decode.

-- The process driving a run ("host:pid:start"), and until when its claim holds.
-- Taking a run is a compare-and-set on these two and the state.
ALTER TABLE runs ADD COLUMN owner TEXT;
ALTER TABLE runs ADD COLUMN lease_expires_at DOUBLE PRECISION;
-- The resolved configuration of every server the run may call (never secret
-- values: environment variables are kept as names with a digest).
ALTER TABLE runs ADD COLUMN servers_json TEXT NOT NULL DEFAULT '{}';

-- When a node was ready to run; started_at is when its own work began, so the
-- time it waited for a thread slot is not counted as work.
ALTER TABLE nodes ADD COLUMN ready_at DOUBLE PRECISION;

-- People who may act under a name other than their operating-system user,
-- each with a secret of their own (only its sha256 is kept).
CREATE TABLE approvers (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL,
    created_at   DOUBLE PRECISION NOT NULL,
    created_by   TEXT NOT NULL
);

-- Attempts that concern no run, or a run that may not exist (an identity refused).
CREATE TABLE audit (
    seq       {{serial_pk}},
    ts        DOUBLE PRECISION NOT NULL,
    kind      TEXT NOT NULL,
    actor     TEXT,
    run_id    TEXT,
    data_json TEXT NOT NULL DEFAULT '{}'
);
