"""A stdio transport for the SDK's ``ClientSession`` over a server we started ourselves.

The SDK's ``stdio_client`` spawns the server *after* the SDK is imported, and
that import costs about a second on a small machine. Starting the server
first (``tools/process.py``) and importing the SDK afterwards lets the server
boot on another core while this process imports: ``recipe approve`` then
waits for the slower of the two instead of their sum. Everything above the
pipes (framing aside) is still the SDK: its session, its message types, its
validation.

The transport also keeps its own account of each ``tools/call`` (a
``CallWatch`` and the connection's ``Wire``, ``tools/wire.py``): whether the
request reached the pipe, whether a line with its id came back and what
kind, whether the server's output ended, mid-line or not. The SDK folds all
of that into one error code (a server's own -32000 error and a closed
connection look the same), so the hub asks the transport, which saw the
bytes, what really happened.

Everything the server writes is bounded and masked here, before the SDK
parses it: a line longer than the server's ``maxMessageBytes`` is not read
on (at most that much and one chunk is ever held), and the session ends,
since nothing after a line given up on can be trusted to be framed right;
each line is masked (``vodou_engine/masking.py``) so no value taken from the
environment reaches the SDK, the hub, the store or a person. Reading goes in
chunks, each a checkpoint, and a large line is masked and parsed on a worker
thread, so a server that floods its output never holds up a timeout.

The transport follows the spec's shutdown order (close stdin, wait, then
terminate, then kill), bounded and shielded, so neither a cancelled caller nor
a stuck server leaves a process behind. A server still working on a call its
caller gave up on gets no stdin grace: it is terminated at once. The server
runs in its own process group so the whole tree it starts (``npx`` → ``node``,
``uvx`` → ``python``) is signalled together.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import IO, TYPE_CHECKING

import trio

from vodou_engine.gcpause import paused_for_import
from vodou_engine.limits import MAX_MESSAGE_BYTES, surely_within_depth
from vodou_engine.masking import Mask
from vodou_engine.servers import ServerConfig
from vodou_engine.tools.process import STDIN_GRACE_S, TERM_GRACE_S, forget, signal_group, start
from vodou_engine.tools.wire import OFF_THREAD_BYTES, RequestId, WatchedWrites, Wire, describe

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream
    from mcp.shared.message import SessionMessage

__all__ = ["ServerProcess", "Wire", "load_sdk", "session_streams", "spawn", "stop"]

FLUSH_S = 0.5
"""How long queued requests get to reach the server before it is told to stop."""

_READ_CHUNK = 1 << 16

_NO_MASK = Mask({})


class ServerProcess:
    """A started server's pipes as trio streams, and a wait that does not block the trio thread."""

    def __init__(self, popen: subprocess.Popen[bytes]):
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
        # Trio lets one task at a time wait on a descriptor; a failing call and the
        # shutdown may both want the exit status.
        self._waiting = trio.Lock()

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    async def wait(self) -> int:
        async with self._waiting:
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


_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
_ID_VALUE = re.compile(rb'\s*:\s*(-?\d+(?![.eE\d])|"(?:[^"\\]|\\.)*")', re.S)


def _top_level_id(line: bytes | bytearray) -> RequestId | None:
    """The ``id`` member of a line that did not parse, found without parsing it (it may be
    nested too deep for any parser); None when there is none to be had."""
    depth = 0
    for match in _TOKEN.finditer(line):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
        elif token in (b"]", b"}"):
            depth -= 1
        elif depth == 1 and token == b'"id"':
            value = _ID_VALUE.match(line, match.end())
            if value is not None:
                try:
                    found: object = json.loads(value.group(1))
                except ValueError:
                    return None
                return found if isinstance(found, (int, str)) and not isinstance(found, bool) else None
    return None


async def spawn(config: ServerConfig, stderr: IO[bytes]) -> ServerProcess:
    """:func:`start`, off the trio thread."""
    return ServerProcess(await trio.to_thread.run_sync(start, config, stderr))


def _import_sdk() -> None:
    with paused_for_import():
        import mcp.client.session
        import mcp.shared.message  # noqa: F401
        import mcp_types  # noqa: F401

        # The SDK imports jsonschema the first time it checks a result against a tool's
        # output schema, on the trio thread, while replies wait unread in the pipe
        # (~30 ms, measured in benchmarks/case_j.py). Here it overlaps the servers' start.
        try:
            import jsonschema.validators  # noqa: F401
            import referencing.exceptions  # noqa: F401
        except ImportError:  # pragma: no cover - an SDK that no longer uses them
            pass


async def load_sdk() -> None:
    """Import the MCP SDK off the trio thread (it takes about a second), once per process."""
    if "mcp.client.session" not in sys.modules:
        await trio.to_thread.run_sync(_import_sdk)


@asynccontextmanager
async def session_streams(
    process: ServerProcess, *, limit: int = MAX_MESSAGE_BYTES, masking: Mask = _NO_MASK
) -> AsyncIterator[tuple[MemoryObjectReceiveStream[SessionMessage | Exception], WatchedWrites, Wire]]:
    """The (read, write) message streams a ``ClientSession`` takes, bridged to the
    process's pipes, and the :class:`Wire` that watches them. ``limit``: the largest
    line read (bytes); ``masking``: applied to every line before the SDK parses it.

    The SDK is imported here, after the spawn, so the two overlap. On exit,
    or if the import is cancelled, the server is stopped (see the module
    docstring) whatever happened inside.
    """
    try:
        await load_sdk()
    except BaseException:
        await stop(process)
        raise
    # Loaded now (load_sdk above): the SDK's streams and message types.
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    wire = Wire(process, limit)
    to_session, read_stream = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_stream, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    writer_done = trio.Event()
    adapter = mcp_types.jsonrpc_message_adapter
    replies = (mcp_types.JSONRPCResponse, mcp_types.JSONRPCError)

    def parse(line: bytes | bytearray) -> tuple[SessionMessage | Exception, RequestId | None, str | None, bool]:
        """(the message, or the error the session reports against a pending request;
        the id a line that is not JSON-RPC names; why it is not; whether no value in it can
        nest deeper than ``limits.MAX_DEPTH``)"""
        line = masking.message(line)
        try:
            return SessionMessage(adapter.validate_json(line, by_name=False)), None, None, surely_within_depth(line)
        except ValueError as exc:
            return exc, _top_level_id(line), describe(line, exc), False

    async def read_pipe() -> None:
        pending = bytearray()  # grows in place: a line of many chunks is not copied per chunk
        too_long = 0  # the size of a line given up on
        try:
            async with to_session:
                try:
                    while not too_long and (chunk := await process.stdout.receive_some(_READ_CHUNK)):
                        pending += chunk
                        if b"\n" in chunk:
                            *lines, rest = pending.split(b"\n")
                            pending = bytearray(rest)
                            for line in lines:
                                if len(line) > limit:
                                    too_long = len(line)
                                    break
                                if line and not line.isspace():
                                    await deliver(line)
                        wire.unfinished = len(pending)
                        if len(pending) > limit:
                            too_long = too_long or len(pending)
                    if too_long:
                        # Given up on: nothing more is read, and the server's next write fails.
                        wire.overflowed(too_long)
                        pending = bytearray()
                        await process.stdout.aclose()
                finally:
                    # Before the stream closes: the callers the SDK then wakes read this.
                    wire.ended(len(pending.strip()))
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.BrokenResourceError,
            OSError,
        ):
            pass  # the session or our own shutdown closed one end; nothing is left to deliver

    async def deliver(line: bytearray) -> None:
        if len(line) < OFF_THREAD_BYTES:
            message, request_id, reason, flat = parse(line)
        else:
            # Pure work: the session closing need not wait for it.
            message, request_id, reason, flat = await trio.to_thread.run_sync(parse, line, abandon_on_cancel=True)
        if reason is not None:
            wire.bad_line_read(request_id, reason)
        elif isinstance(message, SessionMessage) and isinstance(message.message, replies):
            # Noted before the session sees it, so a caller woken by it finds the note.
            wire.reply_read(message.message.id, error=isinstance(message.message, mcp_types.JSONRPCError), flat=flat)
        await to_session.send(message)

    async def write_pipe() -> None:
        try:
            async with from_session:
                async for message in from_session:
                    if isinstance(message.message, mcp_types.JSONRPCRequest):
                        wire.request_written(message.message.id)
                    data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                    await process.stdin.send_all(data.encode() + b"\n")
        except (
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.BrokenResourceError,
            OSError,
        ):
            wire.write_failed = True
            await to_session.aclose()  # the server is gone: let the session see end of stream
        finally:
            writer_done.set()

    async with trio.open_nursery() as pipes:
        pipes.start_soon(read_pipe)
        pipes.start_soon(write_pipe)
        try:
            yield read_stream, WatchedWrites(write_stream, wire), wire
        finally:
            with trio.CancelScope(shield=True):
                write_stream.close()
                read_stream.close()
                with trio.move_on_after(FLUSH_S):
                    await writer_done.wait()
                await stop(process, in_doubt=wire.in_doubt())
            pipes.cancel_scope.cancel()


async def stop(process: ServerProcess, *, in_doubt: bool = False) -> None:
    """Close stdin, wait; then SIGTERM the process group, wait; then SIGKILL it. Always reaps.

    ``in_doubt``: the server may still be working on a call nobody waits for
    any more (a caller cancelled it, or it timed out, and no reply came). Such
    a server is not given the stdin grace, which could let that work run on
    for seconds after the run has moved past it: its group is sent SIGTERM
    at once (stdin is closed only after the signal, so a server that exits on
    end of input cannot slip out before it), then SIGKILL after TERM_GRACE_S.
    """
    with trio.CancelScope(shield=True):
        if in_doubt and process.returncode is None:
            signal_group(process.popen, signal.SIGTERM)
        with suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await process.stdin.aclose()
        if not in_doubt:
            with trio.move_on_after(STDIN_GRACE_S):
                await process.wait()
            if process.returncode is None:
                signal_group(process.popen, signal.SIGTERM)
        with trio.move_on_after(TERM_GRACE_S):
            await process.wait()
        if process.returncode is None:
            signal_group(process.popen, signal.SIGKILL)
            await process.wait()
        # Children the server left behind in its group go with it.
        signal_group(process.popen, signal.SIGKILL, leader_too=False)
        forget(process.popen)
        with suppress(trio.ClosedResourceError, OSError):
            await process.stdout.aclose()
        process.release()
