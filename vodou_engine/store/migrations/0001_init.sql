-- Run store schema, version 1.
--
-- Portable between SQLite (>= 3.24) and PostgreSQL: DOUBLE PRECISION rather
-- than REAL (REAL is 4 bytes on PostgreSQL and would round epoch seconds to
-- minutes), TEXT for JSON, no CHECK on state names so a later version can add
-- a state without rebuilding a table. {{serial_pk}} is filled in per dialect.

CREATE TABLE runs (
    id               TEXT PRIMARY KEY,
    recipe_name      TEXT NOT NULL,
    recipe_path      TEXT,
    source_sha256    TEXT NOT NULL,
    plan_json        TEXT NOT NULL,
    plan_fingerprint TEXT NOT NULL,
    inputs_json      TEXT NOT NULL DEFAULT '{}',
    started_by       TEXT NOT NULL,
    state            TEXT NOT NULL,
    created_at       DOUBLE PRECISION NOT NULL,
    updated_at       DOUBLE PRECISION NOT NULL,
    ended_at         DOUBLE PRECISION,
    error            TEXT
);
CREATE INDEX runs_by_created ON runs (created_at);
CREATE INDEX runs_by_state ON runs (state);

CREATE TABLE nodes (
    run_id      TEXT NOT NULL REFERENCES runs (id),
    node_id     TEXT NOT NULL,
    state       TEXT NOT NULL,
    output_json TEXT,
    error       TEXT,
    started_at  DOUBLE PRECISION,
    ended_at    DOUBLE PRECISION,
    attempts    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, node_id)
);

CREATE TABLE approvals (
    id             TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL REFERENCES runs (id),
    node_id        TEXT NOT NULL,
    step           TEXT NOT NULL,
    state          TEXT NOT NULL DEFAULT 'pending',
    payload_json   TEXT NOT NULL,
    fingerprint    TEXT NOT NULL,
    card_text      TEXT NOT NULL DEFAULT '',
    preview_json   TEXT,
    check_json     TEXT,
    policy_json    TEXT,
    asked_at       DOUBLE PRECISION NOT NULL,
    expires_at     DOUBLE PRECISION,
    approvers_json TEXT NOT NULL DEFAULT '[]',
    decided_by     TEXT,
    decided_at     DOUBLE PRECISION,
    reason         TEXT,
    -- Deferred: ask() points the old question at the new one before inserting it.
    superseded_by  TEXT REFERENCES approvals (id) DEFERRABLE INITIALLY DEFERRED
);
CREATE INDEX approvals_by_run ON approvals (run_id, asked_at);
-- At most one open question per guarded step, whatever the callers race.
CREATE UNIQUE INDEX approvals_one_pending ON approvals (run_id, step) WHERE state = 'pending';

CREATE TABLE effects (
    run_id          TEXT NOT NULL REFERENCES runs (id),
    step            TEXT NOT NULL,
    approval_id     TEXT REFERENCES approvals (id),  -- NULL: the plan says `without asking`
    fingerprint     TEXT NOT NULL,
    idempotency_key TEXT NOT NULL UNIQUE,
    state           TEXT NOT NULL,
    payload_json    TEXT NOT NULL,
    started_at      DOUBLE PRECISION NOT NULL,
    result_json     TEXT,
    error           TEXT,
    ended_at        DOUBLE PRECISION,
    settled_by      TEXT,
    PRIMARY KEY (run_id, step)
);

CREATE TABLE events (
    seq       {{serial_pk}},
    run_id    TEXT NOT NULL REFERENCES runs (id),
    ts        DOUBLE PRECISION NOT NULL,
    kind      TEXT NOT NULL,
    node_id   TEXT,
    actor     TEXT,
    data_json TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX events_by_run ON events (run_id, seq);
