"""``recipe mcp``: the engine as an MCP server (stdio) for agents.

``recipe serve`` mounts the same server at ``/mcp`` over streamable HTTP
(``web/agents.py``): there the agent is proven by a bearer token, and the tools
run on the service's store and warm servers.

An agent (any MCP client: Claude Desktop, an IDE, a script on the SDK) can list
the configured tools with their risk, check a recipe, save it, start it, watch
its own runs, propose a schedule and draft a recipe from a sentence. No tool,
and no argument of any tool, approves, rejects, cancels or reconciles: a person
decides with ``recipe approve`` (or the web inbox of ``recipe serve``).

This module is the command: its flags, and serving over stdin/stdout. It is what
``python -m vodou_engine.agents.mcp_server`` runs, the command an MCP client's
configuration names (docs/agents.md). The CLI loads it for its flags with every
command, so it imports nothing heavy at the top. The server itself:

- ``config.py``: what the person who runs it configured (flags, environment), and
  who the calling agent is;
- ``server.py``: ``build_server``, the SDK's ``MCPServer`` with the instructions and
  the tools (the SDK is imported with it, when the command runs);
- ``mcp_tools.py``: the tools as the SDK declares them: names, titles, annotations,
  descriptions, argument schemas; undeclared arguments refused; errors as results;
- ``tools_only.py``: tools are all it serves and all it advertises;
- ``handlers.py``: what each tool does, over the run API with ``origin="agent"``.
"""

import argparse
import sys

from ..gcpause import own_process, paused_for_import
from ..standalone import command_main
from .config import APPROVERS_ENV, NAME_ENV, SEES_ENV, AgentConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``recipe mcp`` flags."""
    parser.add_argument(
        "--name",
        metavar="NAME",
        help=f"the agent's name: its runs are started as agent:NAME (default: ${NAME_ENV}, else the client's name from initialize)",
    )
    parser.add_argument(
        "--see",
        choices=["own", "all"],
        help=f"whose runs the agent may read: `own` (the runs it started; default) or `all` (default: ${SEES_ENV}, else own)",
    )
    parser.add_argument(
        "--approver",
        action="append",
        metavar="NAME",
        help=f"who decides the runs of an agent's recipe that names no approvers (repeatable; default: ${APPROVERS_ENV}, else your user name)",
    )
    parser.add_argument(
        "--model", help="default model for draft_recipe (llm; default: $VODOU_MODEL, else llm's default model)"
    )
    parser.add_argument(
        "--servers",
        metavar="FILE",
        help="MCP servers JSON (default: $VODOU_SERVERS, ./mcp.json, ~/.config/vodou/mcp.json, then the demo servers)",
    )
    parser.add_argument(
        "--policy",
        metavar="FILE",
        help="tool policy file (default: $VODOU_POLICY, ./vodou-policy.toml, ~/.config/vodou/policy.toml)",
    )
    parser.add_argument(
        "--store", metavar="PATH", help="run store (default: $VODOU_STORE or ~/.local/share/vodou/runs.db)"
    )


def run(args: argparse.Namespace) -> int:
    """Serve MCP over stdin/stdout until the client closes it."""
    config = AgentConfig.from_args(args)
    with paused_for_import():
        from .server import build_server  # the SDK: when the command runs, never for the CLI's flags

        server = build_server(config)
    server.run("stdio")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_main(
        argv,
        prog="recipe mcp",
        description="Serve the engine to agents over MCP (stdio). Agents propose; people approve.",
        add_arguments=add_arguments,
        run=run,
        before=own_process,
    )


if __name__ == "__main__":
    sys.exit(main())
