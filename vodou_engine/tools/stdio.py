"""A stdio transport for the SDK's ``ClientSession`` over a server we started ourselves.

The SDK's ``stdio_client`` spawns the server *after* the SDK is imported, and
that import costs about a second on a small machine. Starting the server
first (``tools/process.py``) and importing the SDK afterwards lets the server
boot on another core while this process imports: ``recipe approve`` then
waits for the slower of the two instead of their sum. Everything above the
pipes (framing aside) is still the SDK: its session, its message types, its
validation.

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
from vodou_engine.tools.process import STDIN_GRACE_S, TERM_GRACE_S, signal_group, start

__all__ = ["ServerProcess", "load_sdk", "session_streams", "spawn", "stop"]

FLUSH_S = 0.5
"""How long queued requests get to reach the server before it is told to stop."""

_READ_CHUNK = 1 << 16


class ServerProcess:
    """A started server's pipes as trio streams, and a wait that does not block the trio thread."""

    def __init__(self, popen: subprocess.Popen):
        assert popen.stdin is not None and popen.stdout is not None
        self.popen = popen
        self.pid = popen.pid
        # The streams own duplicates; closing the originals now means no file object
        # can later close a descriptor number the process has since reused.
        self.stdin = trio.lowlevel.FdStream(os.dup(popen.stdin.fileno()))
        self.stdout = trio.lowlevel.FdStream(os.dup(popen.stdout.fileno()))
        popen.stdin.close()
        popen.stdout.close()
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):
            with suppress(OSError):
                self._pidfd = os.pidfd_open(popen.pid)

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def wait(self) -> int:
        if self._pidfd is not None:
            while self.popen.poll() is None:
                await trio.lowlevel.wait_readable(self._pidfd)
        elif self.popen.poll() is None:
            await trio.to_thread.run_sync(self.popen.wait, abandon_on_cancel=True)
        return self.popen.wait()

    def release(self) -> None:
        if self._pidfd is not None:
            fd, self._pidfd = self._pidfd, None
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


async def spawn(config: ServerConfig, stderr: IO[bytes]) -> ServerProcess:
    """:func:`start`, off the trio thread."""
    return ServerProcess(await trio.to_thread.run_sync(start, config, stderr))


def _import_sdk() -> None:
    from ..gcpause import paused_for_import

    with paused_for_import():
        import mcp.client.session  # noqa: F401
        import mcp.shared.message  # noqa: F401
        import mcp_types  # noqa: F401


async def load_sdk() -> None:
    """Import the MCP SDK off the trio thread (it takes about a second), once per process."""
    if "mcp.client.session" not in sys.modules:
        await trio.to_thread.run_sync(_import_sdk)


@asynccontextmanager
async def session_streams(process: ServerProcess) -> AsyncIterator[tuple[Any, Any]]:
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
        pending = bytearray()  # grows in place: a result of many chunks is not copied per chunk
        try:
            async with to_session:
                while chunk := await process.stdout.receive_some(_READ_CHUNK):
                    pending += chunk
                    if b"\n" not in chunk:
                        continue
                    *lines, rest = pending.split(b"\n")
                    pending = bytearray(rest)
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


async def stop(process: ServerProcess) -> None:
    """Close stdin, wait; then SIGTERM the process group, wait; then SIGKILL it. Always reaps."""
    with trio.CancelScope(shield=True):
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await process.stdin.aclose()
        with trio.move_on_after(STDIN_GRACE_S):
            await process.wait()
        for sig, grace in ((signal.SIGTERM, TERM_GRACE_S), (signal.SIGKILL, None)):
            if process.returncode is not None:
                break
            signal_group(process.popen, sig)
            if grace is None:
                await process.wait()
            else:
                with trio.move_on_after(grace):
                    await process.wait()
        # Children the server left behind in its group go with it.
        signal_group(process.popen, signal.SIGKILL, leader_too=False)
        with suppress(trio.ClosedResourceError, OSError):
            await process.stdout.aclose()
        process.release()


