"""Agents propose, people approve: the engine for MCP clients and models.

``recipe mcp``, an MCP server whose tools list the configured tools with their
risk, check, save and start recipes, read the agent's own runs and propose
schedules, all through the run API (``runs.py``) with ``origin="agent"``. No
tool, and no argument of any tool, approves, rejects, cancels or reconciles: a
person decides, with ``recipe approve`` or in the web inbox.

- ``mcp_server``: the command (its flags; serving over stdio).
- ``config``: what the person who runs it configured, and who the agent is.
- ``server``: ``build_server``, the SDK's ``MCPServer`` with the agent tools
  (``recipe serve`` serves the same at ``/mcp``: ``web/agents.py``).
- ``mcp_tools``: the tools as the SDK declares them (names, titles,
  annotations, descriptions, argument schemas); an undeclared argument is
  refused, a failure is an error result.
- ``tools_only``: tools are all the server serves, and all it advertises.
- ``handlers``: what each tool does, over the run API.

``recipe author "SENTENCE"`` and the ``draft_recipe`` tool:

- ``author``: the command.
- ``drafting``: a recipe drafted by a model (the ``llm`` library) from the
  live tool catalogue, compiled, and corrected from the compiler's own errors.
- ``language``: the compact description of the recipe language models read.

What both use:

- ``catalogue``: the configured servers' tools, each with its risk and
  where the risk came from.
- ``checks``: compile a recipe text for an agent: the card as text and as
  JSON, or the errors as data.
- ``error_data``: an error as data (code, message, place, caret, hint).
- ``approvers``: who decides an agent's run when its recipe names no one.
- ``identity``: the agents' bearer tokens for the ``/mcp`` route of
  ``recipe serve`` (``recipe agent add | list | remove``): only their sha256 is
  kept, apart from the approvers' secrets.

Importing this package costs nothing. The CLI loads ``mcp_server``, ``config``
and ``author`` for their flags with every command, so they import the MCP SDK,
trio, the compiler and ``llm`` only when the command runs; the other modules
import their libraries at the top and are loaded only when they are used (and
``handlers`` loads the run API with the first tool call, after ``initialize``).
"""
