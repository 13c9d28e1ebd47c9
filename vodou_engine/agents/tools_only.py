"""The agent MCP server serves tools, and nothing else, and says so.

MCPServer registers handlers for prompts and resources whether or not it has
any, and the SDK advertises a capability for each registered list handler: the
server claimed ``prompts`` and ``resources`` it does not have, and answered
``prompts/get`` with error code 0 after logging a traceback. With the handlers
gone, ``initialize`` advertises ``tools`` alone, and the SDK answers these
methods as the spec says: -32601 (method not found), or -32602 when their
params are malformed, logging nothing. The SDK keeps its handlers in a private
table and offers no way to drop one; tests/test_agents_protocol.py holds this
to what a client sees, so an SDK that changes the table fails there.
"""

from typing import Any

NOT_OFFERED = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
)
"""Methods of the spec this server does not serve: it has tools only."""


def offer_tools_only(server: Any) -> None:
    """Drop the SDK's handlers of :data:`NOT_OFFERED` from ``server`` (an ``MCPServer``)."""
    handlers = server._lowlevel_server._request_handlers
    for method in NOT_OFFERED:
        handlers.pop(method, None)
