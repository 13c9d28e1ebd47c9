-- Run store schema, version 8: a run's plan in a table of its own, compressed.
--
-- Additive only (docs/store-schema.md): one new table. A run's plan is written once
-- and never changes, but in `runs.plan_json` every write to the run's row (its state,
-- owner, lease: several per run) rewrote it too, since a database rewrites a whole
-- row (SQLite reads the old one whole first): at 100,000 branches a plan of 16 MB,
-- copied several times per write. Runs stored from now on keep `runs.plan_json` empty
-- and their plan here; runs stored before keep theirs where it is.
--
-- `plan_zlib`: the plan's canonical JSON (the bytes its fingerprint covers), zlib
-- compressed (16 MB of JSON at 100,000 branches is about 1 MB here).
CREATE TABLE run_plans (
    run_id    TEXT PRIMARY KEY REFERENCES runs (id),
    plan_zlib {{blob}} NOT NULL
);
