"""A stdio MCP server on the official SDK that notes when each call reaches its tool.

``get_count {"after": N}`` is a read (``readOnlyHint``) that answers ``{"n": N + 1,
"at": time.time()}`` with an output schema, so a chain passes ``n`` on from
call to call and the client's schema check runs as it does for any
structured tool. Before answering, the tool appends one line
``{"n": N + 1, "at": ...}`` to the file named by ``CHAIN_LOG`` (opened once,
``O_APPEND``, no fsync: a few microseconds, the same for every client).

The tool is ``async``, so the SDK runs it on its event loop (no worker
thread): what a call costs on this side is the SDK's own request handling,
which is the same whoever the client is. The time between two calls'
``at`` is then the client's whole turn: reading the reply, whatever it
does with it, and sending the next request.

Run it as ``python benchmarks/chain_server.py`` (a path, not a module: the
engine starts MCP servers with a minimal environment and no PYTHONPATH; it
imports nothing but the SDK).
"""

from __future__ import annotations

import gc
import os
import time

# The SDK's import is most of the start; the collector has nothing to find in it.
gc.disable()

from mcp.server.mcpserver import MCPServer  # noqa: E402
from mcp.types import ToolAnnotations  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

LOG_ENV = "CHAIN_LOG"

server = MCPServer("chain", instructions="Notes when each call reaches its tool.", log_level="WARNING")
_log = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if os.environ.get(LOG_ENV) else None


class Tick(TypedDict):
    n: int
    at: float


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def get_count(after: int = 0) -> Tick:
    """The next number after ``after``, and when (time.time()) this call reached the tool."""
    at = time.time()
    if _log is not None:
        os.write(_log, f'{{"n": {after + 1}, "at": {at!r}}}\n'.encode())
    return Tick(n=after + 1, at=at)


if __name__ == "__main__":
    gc.freeze()
    gc.enable()
    server.run()
