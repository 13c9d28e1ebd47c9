"""An MCP server on the official SDK (``MCPServer`` over stdio), with the names real servers use.

Run it as ``[sys.executable, "tests/sdk_server.py"]``. Its tools are named as the
spec allows and published servers name them: with dashes and with dots.

Tools
-----
``get-env``
    A read (``readOnlyHint: true``): answers the value of the environment
    variable ``name`` (``""`` when unset), as the reference "everything" server's
    tool of that name does.
``notes.list``
    A read (``readOnlyHint: true``): answers the notes added so far (one per line).
``notes.add``
    An effect (``readOnlyHint: false``): adds ``text`` to the notes.
``notes.tag``
    An effect (``readOnlyHint: false``): adds ``text`` with a ``priority`` (one of
    ``low``, ``normal``, ``high``, required) ``copies`` times (an integer, default 1):
    a schema with a required field, an enum and an integer, for the argument checks.

Environment
-----------
``SDK_LOG``
    A file to append one JSON line to per event, flushed and fsynced before the
    server answers: ``{"event": "start", "pid"}`` as soon as the process starts
    (before the SDK is imported: a server that is started at all leaves it), and
    ``{"tool", "arguments", "pid"}`` per call.
``SDK_NOTES``
    The file ``notes.add`` appends to and ``notes.list`` reads (default: none,
    the notes live in memory).
"""

from __future__ import annotations

import json
import os
from typing import Literal

LOG = os.environ.get("SDK_LOG")


def log(record: dict) -> None:
    if not LOG:
        return
    with open(LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, "pid": os.getpid()}) + "\n")
        f.flush()
        os.fsync(f.fileno())


log({"event": "start"})

from mcp.server.mcpserver import MCPServer  # noqa: E402 - the start is logged before the SDK loads
from mcp.types import ToolAnnotations  # noqa: E402

NOTES = os.environ.get("SDK_NOTES")
_memory: list[str] = []

server = MCPServer("sdk-test-server", version="1.0.0")


def get_env(name: str) -> str:
    """The value of an environment variable of this server, or "" when it is not set."""
    log({"tool": "get-env", "arguments": {"name": name}})
    return os.environ.get(name, "")


def notes_list() -> str:
    """The notes added so far, one per line."""
    log({"tool": "notes.list", "arguments": {}})
    if NOTES:
        return open(NOTES, encoding="utf-8").read() if os.path.exists(NOTES) else ""
    return "".join(f"{n}\n" for n in _memory)


def notes_add(text: str) -> str:
    """Add a note."""
    log({"tool": "notes.add", "arguments": {"text": text}})
    if NOTES:
        with open(NOTES, "a", encoding="utf-8") as f:
            f.write(text + "\n")
    else:
        _memory.append(text)
    return "added"


def notes_tag(text: str, priority: Literal["low", "normal", "high"], copies: int = 1) -> str:
    """Add a note with a priority, ``copies`` times."""
    log({"tool": "notes.tag", "arguments": {"text": text, "priority": priority, "copies": copies}})
    for _ in range(copies):
        _memory.append(f"[{priority}] {text}")
    return "tagged"


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
server.add_tool(get_env, name="get-env", annotations=READ)
server.add_tool(notes_list, name="notes.list", annotations=READ)
server.add_tool(
    notes_add,
    name="notes.add",
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
)
server.add_tool(
    notes_tag,
    name="notes.tag",
    annotations=ToolAnnotations(
        read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
    ),
)

if __name__ == "__main__":
    server.run("stdio")
