"""A stdio transport for the SDK's ``ClientSession`` over a server we spawned ourselves.

The SDK's ``stdio_client`` spawns the server *after* the SDK is imported, and
that import costs about a second on a small machine. Spawning with trio first
and importing the SDK afterwards lets the server boot on another core while
this process imports: ``recipe approve`` then waits for the slower of the two
instead of their sum. Everything above the pipes (framing aside) is still the
SDK: its session, its message types, its validation.

The transport follows the spec's shutdown order (close stdin, wait, then
terminate, then kill), bounded and shielded, so neither a cancelled caller nor
a stuck server leaves a process behind. The server runs in its own process
group so the whole tree it starts (``npx`` → ``node``, ``uvx`` → ``python``)
is signalled together.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import IO, Any

import trio

from vodou_engine.servers import ServerConfig

__all__ = ["default_environment", "load_sdk", "session_streams", "spawn"]

_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a server inherits from our environment: the SDK's own list (``tests/test_hub.py``
checks the two agree), so a server sees the same world whichever starts it."""

STDIN_GRACE_S = 2.0
"""How long a server gets to exit on its own once its stdin is closed."""
TERM_GRACE_S = 2.0
"""How long after SIGTERM before SIGKILL."""
FLUSH_S = 0.5
"""How long queued requests get to reach the server before it is told to stop."""

_READ_CHUNK = 1 << 16


def default_environment() -> dict[str, str]:
    env = {}
    for key in _INHERITED:
        value = os.environ.get(key)
        # A shell function exported by bash starts with "()"; never hand one on.
        if value is not None and not value.startswith("()"):
            env[key] = value
    return env


async def spawn(config: ServerConfig, stderr: IO[bytes]) -> trio.Process:
    """Start the server process now; no protocol traffic yet.

    Raises OSError (FileNotFoundError, PermissionError, …) when it cannot run.
    """
    return await trio.lowlevel.open_process(
        [config.command, *config.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=default_environment() | dict(config.env),
        cwd=config.cwd,
        start_new_session=sys.platform != "win32",
    )


def _import_sdk() -> None:
    import mcp.client.session  # noqa: F401
    import mcp.shared.message  # noqa: F401
    import mcp_types  # noqa: F401


async def load_sdk() -> None:
    """Import the MCP SDK off the trio thread (it takes about a second), once per process."""
    if "mcp.client.session" not in sys.modules:
        await trio.to_thread.run_sync(_import_sdk)


@asynccontextmanager
async def session_streams(process: trio.Process) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) message streams a ``ClientSession`` takes, bridged to the process's pipes.

    The SDK is imported here, after the spawn, so the two overlap. On exit,
    or if the import is cancelled, the server is stopped (see the module
    docstring) whatever happened inside.
    """
    try:
        await load_sdk()
    except BaseException:
        await stop(process)
        raise
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    to_session, read_stream = anyio.create_memory_object_stream[Any](0)
    write_stream, from_session = anyio.create_memory_object_stream[Any](0)
    writer_done = trio.Event()
    adapter = mcp_types.jsonrpc_message_adapter

    async def read_pipe() -> None:
        assert process.stdout is not None
        pending = b""
        try:
            async with to_session:
                while chunk := await process.stdout.receive_some(_READ_CHUNK):
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        try:
                            message: Any = SessionMessage(adapter.validate_json(line, by_name=False))
                        except ValueError as exc:  # the session reports it against the pending request
                            message = exc
                        await to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            pass  # the session or our own shutdown closed one end; nothing is left to deliver

    async def write_pipe() -> None:
        assert process.stdin is not None
        try:
            async with from_session:
                async for message in from_session:
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send_all(data.encode() + b"\n")
        except (anyio.ClosedResourceError, anyio.BrokenResourceError, trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await to_session.aclose()  # the server is gone: let the session see end of stream
        finally:
            writer_done.set()

    async with trio.open_nursery() as pipes:
        pipes.start_soon(read_pipe)
        pipes.start_soon(write_pipe)
        try:
            yield read_stream, write_stream
        finally:
            with trio.CancelScope(shield=True):
                write_stream.close()
                read_stream.close()
                with trio.move_on_after(FLUSH_S):
                    await writer_done.wait()
                await stop(process)
            pipes.cancel_scope.cancel()


async def stop(process: trio.Process) -> None:
    """Close stdin, wait; then SIGTERM the process group, wait; then SIGKILL it. Always reaps."""
    with trio.CancelScope(shield=True):
        if process.stdin is not None:
            with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
                await process.stdin.aclose()
        with trio.move_on_after(STDIN_GRACE_S):
            await process.wait()
        for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, None)):
            if process.returncode is not None:
                break
            _signal_group(process, sig)
            if grace is None:
                await process.wait()
            else:
                with trio.move_on_after(grace):
                    await process.wait()
        # Children the server left behind in its group go with it.
        _signal_group(process, signal.SIGKILL, leader_too=False)
        if process.stdout is not None:
            with suppress(trio.ClosedResourceError, OSError):
                await process.stdout.aclose()


def _signal_group(process: trio.Process, sig: int, *, leader_too: bool = True) -> None:
    if sys.platform == "win32":  # pragma: no cover - no process groups
        if leader_too:
            process.kill()
        return
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        if leader_too and process.returncode is None:
            with suppress(ProcessLookupError):
                os.kill(process.pid, sig)
