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
``get-count``
    A read: reports progress ``1..steps`` of ``steps`` (message ``"step i"``), logging
    ``{"tool": "get-count", "progress": i}`` before each, and answers ``"counted N"``.
``get-name``
    A read that asks the user (form elicitation) "Whom should I greet?" for ``name``
    (a string, required) and ``excited`` (a boolean); logs ``{"tool": "get-name",
    "answer": action, "content": ...}`` per answer it receives, and answers the greeting,
    or ``"declined"`` / ``"cancelled"``.
``send-note``
    An effect that asks "Send it?" (form elicitation, ``sure``: boolean) before it sends;
    logs ``{"tool": "send-note", "answer": action}`` and answers ``"sent"`` only when accepted.
``research``
    Listed with ``execution.taskSupport: "required"``: a client must call it as a task.

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
``SDK_ASK_FILE``
    A file whose text, when it exists, ``get-name`` asks instead of "Whom should I greet?"
    (the same fields): a test changes the server's words between two calls.
"""

from __future__ import annotations

import gc
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

# The SDK's import and the tool registrations build a large graph of objects that live until
# exit: the collector stays paused while they are made, then they are frozen out of its view
# before serving (as vodou_engine/demo/app.py does; a start and exit measured 0.62 CPU-s before, 0.47 after).
gc.disable()

from mcp.server.elicitation import AcceptedElicitation, DeclinedElicitation  # noqa: E402
from mcp.server.mcpserver import Context, MCPServer  # noqa: E402 - the start is logged before the SDK loads
from mcp.types import ToolAnnotations  # noqa: E402
from mcp_types import ToolExecution  # noqa: E402
from pydantic import BaseModel  # noqa: E402

NOTES = os.environ.get("SDK_NOTES")
_memory: list[str] = []


class _Server(MCPServer):
    async def list_tools(self):  # type: ignore[no-untyped-def]
        tools = await super().list_tools()
        required = ToolExecution(task_support="required")
        return [t.model_copy(update={"execution": required}) if t.name == "research" else t for t in tools]


server = _Server("sdk-test-server", version="1.0.0")


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


async def count_slowly(steps: int, ctx: Context) -> str:
    """Count to ``steps``, reporting progress at each."""
    for i in range(1, steps + 1):
        log({"tool": "get-count", "progress": i})
        await ctx.report_progress(i, steps, f"step {i}")
    return f"counted {steps}"


class Greeting(BaseModel):
    name: str
    excited: bool = False


def _asked() -> str:
    """What ``get-name`` asks: ``SDK_ASK_FILE``'s text when it exists."""
    words = os.environ.get("SDK_ASK_FILE", "")
    if words and os.path.isfile(words):
        with open(words, encoding="utf-8") as f:
            return f.read()
    return "Whom should I greet?"


async def ask_name(ctx: Context) -> str:
    """Ask the user whom to greet, and greet them."""
    answer = await ctx.elicit(_asked(), Greeting)
    if isinstance(answer, AcceptedElicitation):
        log({"tool": "get-name", "answer": "accept", "content": answer.data.model_dump()})
        return f"hello {answer.data.name}" + ("!" if answer.data.excited else "")
    action = "decline" if isinstance(answer, DeclinedElicitation) else "cancel"
    log({"tool": "get-name", "answer": action, "content": None})
    return "declined" if action == "decline" else "cancelled"


class Sure(BaseModel):
    sure: bool


async def send_note(text: str, ctx: Context) -> str:
    """Send a note, once the user confirms."""
    answer = await ctx.elicit("Send it?", Sure)
    action = (
        "accept"
        if isinstance(answer, AcceptedElicitation)
        else "decline"
        if isinstance(answer, DeclinedElicitation)
        else "cancel"
    )
    log({"tool": "send-note", "answer": action})
    return "sent" if action == "accept" else "not sent"


def research(topic: str) -> str:
    """Research a topic (a long task)."""
    log({"tool": "research", "arguments": {"topic": topic}})
    return f"researched {topic}"


READ = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
server.add_tool(get_env, name="get-env", annotations=READ)
server.add_tool(notes_list, name="notes.list", annotations=READ)
server.add_tool(count_slowly, name="get-count", annotations=READ)
server.add_tool(ask_name, name="get-name", annotations=READ)
server.add_tool(research, name="research", annotations=READ)
server.add_tool(send_note, name="send-note")
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
    gc.freeze()
    gc.enable()
    server.run("stdio")
