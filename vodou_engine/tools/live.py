"""One server as the hub keeps it, from spawn (or first request) to exit.

Its owner task (``tools/session.py``) alone opens and closes its session and
writes what it learns here; ``Hub.call`` and the rest only read it. What a
person sees of it is masked: a ``${VAR}`` value it was given never shows in
its stderr tail or a message about it.
"""

from __future__ import annotations

import os
from typing import IO, TYPE_CHECKING

import trio

from vodou_engine.errors import ServerStartError
from vodou_engine.limits import MAX_MESSAGE_BYTES
from vodou_engine.servers import HTTP, ResolvedServer, ServerConfig
from vodou_engine.tools.hooks import CallHooks
from vodou_engine.tools.results import ToolInfo

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from vodou_engine.tools.stdio import ServerProcess
    from vodou_engine.tools.wire import CallWatch, Wire

__all__ = ["STDERR_TAIL_LINES", "LiveServer"]

STDERR_TAIL_LINES = 20
_STDERR_TAIL_BYTES = 64 * 1024


class LiveServer:
    """A server from spawn (or first request) to exit; callers only read it, its owner task alone closes it."""

    def __init__(self, name: str, resolved: ResolvedServer, stderr: IO[bytes] | None, start_timeout: float):
        self.name = name
        self.config: ServerConfig = resolved.template
        """As written (``${VAR}`` unexpanded): what every message shows."""
        self.resolved = resolved
        self.stderr = stderr
        self.start_timeout = start_timeout
        """Seconds it gets to start, answer ``initialize`` and list its tools."""
        self.session: ClientSession | None = None
        self.tools: dict[str, ToolInfo] = {}
        self.ready = trio.Event()
        """Set once the session is usable, or once starting it has failed (``start_error``)."""
        self.start_error: ServerStartError | None = None
        self.owner_scope = trio.CancelScope()
        """Cancelled to abandon a start still in progress; a ready session is closed by request instead."""
        self.close_requested = trio.Event()
        self.failure: str | None = None
        self.closed = False
        self.process: ServerProcess | None = None
        """Set once spawned; after the hub closes, ``process.returncode`` says how it ended."""
        self.wire: Wire | None = None
        """What the transport saw: set with the session."""
        self.link: Wire | None = None
        """The same, from the moment the transport is open (a start that fails is worded from it)."""
        self.calls: dict[CallWatch, CallHooks] = {}
        """Its calls in flight, with their callers' hooks: where a question it asks goes (``tools/hooks.py``)."""
        self.questions_unanswered = 0
        """Questions it asked that nobody could be asked (no call, or several, out; URL mode): answered cancel."""
        self.task_required: frozenset[str] = frozenset()
        """Tools it lists with ``execution.taskSupport: "required"``: callable only as a task, which
        this client does not make (``planning.resolve`` refuses them before anything runs)."""

    @property
    def is_http(self) -> bool:
        return self.config.transport == HTTP

    @property
    def limit(self) -> int:
        """The largest message read from it: its ``maxMessageBytes``, else MAX_MESSAGE_BYTES."""
        return self.config.max_message_bytes or MAX_MESSAGE_BYTES

    def mask(self, text: str) -> str:
        return self.resolved.mask(text)

    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> list[str]:
        if self.stderr is None:
            return []
        return [self.mask(line) for line in _tail(self.stderr, lines)]


def _tail(f: IO[bytes], lines: int) -> list[str]:
    # The child shares this file's offset; pread leaves it alone so the child
    # keeps appending where it was instead of overwriting from our seek.
    try:
        fd = f.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - _STDERR_TAIL_BYTES)
        if hasattr(os, "pread"):
            data = os.pread(fd, size - start, start)
        else:  # pragma: no cover - Windows
            here = f.tell()
            f.seek(start)
            data = f.read(size - start)
            f.seek(here)
    except (OSError, ValueError):
        return []
    text = data.decode("utf-8", "replace")
    return [line for line in text.splitlines() if line.strip()][-lines:]
