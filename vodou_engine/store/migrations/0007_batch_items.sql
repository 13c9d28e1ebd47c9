-- Run store schema, version 7: the items a person approved of a loop's batch.
--
-- Additive only (docs/store-schema.md): one new column. An effect inside a `for each`
-- asks one question for all its items; the person may approve some of them.

-- `items_json`: for an approved batch question, the JSON list of the item indexes
-- approved (`[0, 2]`); NULL: every item (and every question that is not a batch).
ALTER TABLE approvals ADD COLUMN items_json TEXT;
