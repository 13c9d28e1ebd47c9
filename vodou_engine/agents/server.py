"""The agent MCP server, built on the official SDK's ``MCPServer``.

``recipe mcp`` serves it over stdio (``mcp_server.py``); ``recipe serve`` serves it
over streamable HTTP at ``/mcp`` (``web/agents.py``), where the agent is proven by a
bearer token and the tools run on the service's store and warm servers
(``build_server(..., impl=, identify=)``).

Importing this module imports the SDK (about a second, most of the server's start):
nothing else heavy is loaded before the server answers ``initialize``
(docs/agents.md, "Start-up and speed").
"""

from collections.abc import Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer

from .. import __version__
from .config import AgentConfig, agent_identity
from .handlers import WHERE_A_PERSON_DECIDES, AgentServer
from .mcp_tools import add_tools
from .tools_only import offer_tools_only

INSTRUCTIONS = (
    "vodou runs tool recipes that never do anything a person did not approve. Use list_tools to see the tools "
    "and their risk, draft_recipe or check_recipe to write a recipe, start_run to run it: reads run at once, "
    "and the run parks before every effect (risk write or critical) until a person decides. "
    + WHERE_A_PERSON_DECIDES
    + " run_status shows where your runs stand; you see the runs you started."
)


def build_server(
    config: AgentConfig, *, impl: AgentServer | None = None, identify: Callable[[Any], str] | None = None
) -> Any:
    """The MCPServer with the agent tools.

    ``impl``: the tools' implementation (default: an :class:`AgentServer` over ``config``;
    ``recipe serve`` gives its own, on the service's store and warm servers).
    ``identify``: who is calling, from the tool call's context (default: the configured
    name, else the client's name from ``initialize``; over HTTP, the agent its bearer
    token proved, and nothing else)."""
    impl = impl if impl is not None else AgentServer(config)
    # subscriptions=False: its tools never change, so there is nothing to listen for
    server = MCPServer(
        "vodou", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING", subscriptions=False
    )
    offer_tools_only(server)

    def who(ctx: Context) -> str:
        if identify is not None:
            return identify(ctx)
        params = ctx.session.client_params
        return agent_identity(
            config, params.client_info.name if params is not None and params.client_info is not None else None
        )

    add_tools(server, impl, who)
    server.vodou = impl  # type: ignore[attr-defined]  # the SDK's server has no slot for it; for tests that drive it in-process
    return server
