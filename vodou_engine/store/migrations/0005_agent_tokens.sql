-- Run store schema, version 5: the agents that may use the MCP server `recipe serve`
-- mounts at /mcp (`recipe agent add NAME`; docs/agents.md).
--
-- Additive only (docs/store-schema.md): one new table, nothing else changes.
-- An agent's bearer token is kept as its sha256 only, as the approvers' secrets
-- are. This table is apart from `approvers` on purpose: an agent's token is never
-- an approver's secret, so it can never decide anything.

-- `name` is the agent's name; its runs are started by `agent:NAME`. `sees` is
-- whose runs it may read (`own` or `all`); `approvers_json` who decides the runs
-- of its recipes that name no approvers (a JSON list; empty: the serving
-- process's default). Removing the row stops its token at once.
CREATE TABLE agents (
    name           TEXT PRIMARY KEY,
    token_sha256   TEXT NOT NULL,
    sees           TEXT NOT NULL DEFAULT 'own',
    approvers_json TEXT NOT NULL DEFAULT '[]',
    created_at     DOUBLE PRECISION NOT NULL,
    created_by     TEXT NOT NULL
);
CREATE UNIQUE INDEX agents_by_token ON agents (token_sha256);
