"""Agents propose, people approve: the engine for MCP clients and models.

- ``mcp_server``: ``recipe mcp``, an MCP server (stdio) whose tools list the
  configured tools with their risk, check, save and start recipes, read the
  agent's own runs and propose schedules, all through the run API
  (``runs.py``) with ``origin="agent"``. No tool, and no argument of any
  tool, approves, rejects, cancels or reconciles: a person decides, with
  ``recipe approve`` or in the web inbox.
- ``author``: ``recipe author "SENTENCE"`` and the ``draft_recipe`` tool, a
  recipe drafted by a model (the ``llm`` library) from the live tool
  catalogue, compiled, and corrected from the compiler's own errors.
- ``catalogue``: the configured servers' tools, each with its risk and
  where the risk came from.
- ``checks``: compile a recipe text for an agent: the card as text and as
  JSON, or the errors as data.
- ``language``: the compact description of the recipe language models read.
- ``identity``: the agents' bearer tokens for the ``/mcp`` route of
  ``recipe serve`` (``recipe agent add | list | remove``): only their sha256 is
  kept, apart from the approvers' secrets.

Importing this package costs nothing: each module imports the MCP SDK,
trio, the compiler or ``llm`` inside the functions that need them.
"""
