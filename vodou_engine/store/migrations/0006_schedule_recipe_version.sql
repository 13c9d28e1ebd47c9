-- Run store schema, version 6: the saved recipe version a schedule runs.
--
-- Additive only (docs/store-schema.md): one new column. A schedule a person added
-- before keeps running the latest version (NULL); one an agent proposed is pinned
-- to the latest version saved now, the nearest to what the person who enabled it saw
-- (and every firing of it still refuses a version that opts out of asking).

-- `recipe_version`: the version of `recipe` this schedule fires, whatever is saved
-- after it (set for a schedule an agent proposes: the person who enables it approves
-- that version); NULL: the latest version at each firing (a person's schedule).
ALTER TABLE schedules ADD COLUMN recipe_version INTEGER;
UPDATE schedules SET recipe_version = (SELECT MAX(r.version) FROM recipes r WHERE r.name = schedules.recipe) WHERE origin = 'agent';
