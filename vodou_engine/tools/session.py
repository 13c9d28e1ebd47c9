"""One server's session, owned by one task: spawned (or reached), connected, closed.

Every session is entered and exited by its own owner task (:func:`own`). The
SDK's ``ClientSession`` opens a task group on enter; leaving it from any other
task unwinds the wrong cancel scope and corrupts the nursery stack, so the
hub only ever *asks* an owner to close (``LiveServer.close_requested``), or
cancels the owner's own scope while a start is still in progress
(``LiveServer.owner_scope``), and lets the owner do it.

The MCP SDK costs about a second to import. The stdio transport imports it
after the server process is spawned (``tools/stdio.py``), so its import
overlaps the server's own start; ``tools/http.py``, which brings httpx2 and
the SDK's HTTP client, is imported on a worker thread. Until then nothing
here touches the SDK: its names are imported inside the functions that run
once it is loaded.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio

from vodou_engine.gcpause import paused_for_import
from vodou_engine.tools import stdio
from vodou_engine.tools.failures import is_cancellation, leaves, start_error
from vodou_engine.tools.live import LiveServer
from vodou_engine.tools.results import tool_info
from vodou_engine.tools.wire import WatchedWrites, Wire

if TYPE_CHECKING:
    from mcp.client._transport import ReadStream
    from mcp.client.session import ClientSession
    from mcp.shared.message import SessionMessage
    from mcp_types import Implementation, Tool

__all__ = ["own", "relist"]

logger = logging.getLogger("vodou_engine.tools.hub")
"""The hub's log, whichever of its modules writes to it."""


async def own(
    srv: LiveServer, popen: subprocess.Popen[bytes] | None, spawned: trio.Event, on_ready: Callable[[LiveServer], None]
) -> None:
    """Spawns (or reaches), connects and finally closes one server, all in this task (see the module docstring).

    ``popen``: a process started before trio was imported, taken over instead of
    spawning one. ``spawned`` is set once the process exists (or could not be made;
    at once for an HTTP server), before the SDK is imported, so a caller can go on
    with its own work while the server boots. ``on_ready`` is called the moment the
    session is usable, before anyone waiting on ``srv.ready`` wakes.
    """
    try:
        with srv.owner_scope:
            async with _streams(srv, popen, spawned) as (read, write, wire):
                srv.link = wire
                from vodou_engine.tools.client import EngineSession, answer_questions  # the SDK is loaded by now

                async with EngineSession(
                    read, write, client_info=_client_info(), elicitation_callback=answer_questions(srv)
                ) as session:
                    with trio.fail_after(srv.start_timeout):
                        await session.initialize()
                        tools = await _list_all_tools(session)
                    srv.wire = wire
                    srv.session = session
                    srv.tools = {t.name: tool_info(t) for t in tools}
                    srv.task_required = frozenset(t.name for t in tools if _task_required(t))
                    on_ready(srv)
                    srv.ready.set()
                    await srv.close_requested.wait()
    except BaseException as exc:
        if not srv.ready.is_set():
            if is_cancellation(exc) or isinstance(exc, KeyboardInterrupt):
                raise
            srv.start_error = start_error(srv, exc)
            srv.start_error.__cause__ = leaves(exc)[0]
            return
        if is_cancellation(exc) or isinstance(exc, KeyboardInterrupt):
            raise
        # After start a crashed session must not take the whole run down:
        # remember why, and let the next call to this server say so.
        srv.failure = srv.mask(f"{type(leaves(exc)[0]).__name__}: {leaves(exc)[0]}")
        logger.warning("MCP server %r session ended with an error: %s", srv.name, srv.failure)
    finally:
        srv.closed = True
        srv.ready.set()  # nobody waits forever on a server that is gone


@asynccontextmanager
async def _streams(
    srv: LiveServer, popen: subprocess.Popen[bytes] | None, spawned: trio.Event
) -> AsyncIterator[tuple[ReadStream[SessionMessage | Exception], WatchedWrites, Wire]]:
    """The session's message streams and the transport's wire: a process started here
    (``popen``: one started before trio, taken over), or an HTTP session."""
    if srv.is_http:
        spawned.set()  # nothing to spawn: the first request is the start
        if "vodou_engine.tools.http" not in sys.modules:  # httpx2 and the SDK: off the trio thread
            await trio.to_thread.run_sync(_import_http)
        from vodou_engine.tools import http

        async with http.session_streams(
            srv.resolved.config, srv.config.url or "", limit=srv.limit, masking=srv.resolved.masking
        ) as streams:
            yield streams
        return
    try:
        if popen is not None:
            process = stdio.ServerProcess(popen)
        else:
            assert srv.stderr is not None  # a server started here always has its stderr file (``Hub._own``)
            process = await stdio.spawn(srv.resolved.config, srv.stderr)
        srv.process = process
    finally:
        spawned.set()
    async with stdio.session_streams(process, limit=srv.limit, masking=srv.resolved.masking) as streams:
        yield streams


def _import_http() -> None:
    with paused_for_import():
        from vodou_engine.tools import http  # noqa: F401 - httpx2 and the SDK's HTTP client, imported at its top


def _client_info() -> Implementation:
    # Imported here, once the server is spawned: importlib.metadata costs ~10 ms.
    from importlib.metadata import PackageNotFoundError, version

    from mcp_types import Implementation

    try:
        v = version("vodou_engine")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        v = "0"
    return Implementation(name="vodou-engine", version=v)


def _task_required(tool: Tool) -> bool:
    """The tool may only be called as a task (MCP 2025-11-25, ``execution.taskSupport``)."""
    execution = tool.execution
    return execution is not None and execution.task_support == "required"


async def relist(srv: LiveServer) -> None:
    """List a ready server's tools again and keep what it says now. A warm server (one kept
    for many runs) may have changed its tools or their annotations since it started, with or
    without ``notifications/tools/list_changed``: a run planned, or an approved effect driven,
    on the listing of its start would assess its risks from what the server no longer says."""
    session = srv.session
    if session is None or srv.closed:
        return  # not started, or gone: its next call says why
    with trio.fail_after(srv.start_timeout):
        tools = await _list_all_tools(session)
    srv.tools = {t.name: tool_info(t) for t in tools}
    srv.task_required = frozenset(t.name for t in tools if _task_required(t))


async def _list_all_tools(session: ClientSession) -> list[Tool]:
    from mcp_types import PaginatedRequestParams

    tools: list[Tool] = []
    cursor: str | None = None
    seen: set[str] = set()
    while True:
        params = PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools
        if cursor in seen:
            # A server that hands back a cursor it already gave would loop forever.
            raise RuntimeError(f"tools/list returned the cursor {cursor!r} twice")
        seen.add(cursor)
