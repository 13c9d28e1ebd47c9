-- Run store schema, version 6: the saved recipe version a schedule runs.
--
-- Additive only (docs/store-schema.md): one new column, NULL for every schedule
-- stored before, which keeps running the latest version as it did.

-- `recipe_version`: the version of `recipe` this schedule fires, whatever is saved
-- after it (set for a schedule an agent proposes: the person who enables it approves
-- that version); NULL: the latest version at each firing (a person's schedule).
ALTER TABLE schedules ADD COLUMN recipe_version INTEGER;
