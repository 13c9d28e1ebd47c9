-- Run store schema, version 3: saved recipes (versioned), schedules, and the
-- record of every due time a schedule reached (fired once, or skipped).
--
-- Additive only (docs/store-schema.md).

-- A saved recipe: its text and the plan it compiled to, one row per version.
-- Saving again adds a version; nothing is ever overwritten.
CREATE TABLE recipes (
    name             TEXT NOT NULL,
    version          INTEGER NOT NULL,
    source           TEXT NOT NULL,
    plan_json        TEXT NOT NULL,
    plan_fingerprint TEXT NOT NULL,
    saved_at         DOUBLE PRECISION NOT NULL,
    saved_by         TEXT NOT NULL,
    origin           TEXT NOT NULL DEFAULT 'person',
    PRIMARY KEY (name, version)
);

-- A recipe on a cron schedule. `next_due` is the next due time not yet decided;
-- moving it is a compare-and-set, so two schedulers cannot both take one due time.
CREATE TABLE schedules (
    name        TEXT PRIMARY KEY,
    recipe      TEXT NOT NULL,
    cron        TEXT NOT NULL,
    tz          TEXT NOT NULL,
    inputs_json TEXT NOT NULL DEFAULT '{}',
    state       TEXT NOT NULL,
    catch_up_s  DOUBLE PRECISION NOT NULL DEFAULT 3600,
    next_due    DOUBLE PRECISION,
    created_at  DOUBLE PRECISION NOT NULL,
    created_by  TEXT NOT NULL,
    origin      TEXT NOT NULL DEFAULT 'person',
    updated_at  DOUBLE PRECISION NOT NULL
);

-- Every due time a schedule reached, decided once: fired (with the run it started)
-- or skipped (missed beyond the catch-up window, or folded into a later one).
CREATE TABLE firings (
    schedule   TEXT NOT NULL,
    due_at     DOUBLE PRECISION NOT NULL,
    outcome    TEXT NOT NULL,
    decided_at DOUBLE PRECISION NOT NULL,
    decided_by TEXT,
    run_id     TEXT,
    note       TEXT,
    PRIMARY KEY (schedule, due_at)
);

-- Which saved recipe version a run ran, and the schedule that started it.
ALTER TABLE runs ADD COLUMN saved_recipe TEXT;
ALTER TABLE runs ADD COLUMN saved_version INTEGER;
ALTER TABLE runs ADD COLUMN schedule TEXT;
