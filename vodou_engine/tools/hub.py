"""The MCP client hub: one live session per server for the length of a run.

Each server named by a run is started once, all of them in parallel, and
kept until the run ends; steps then call tools over the open sessions.

Every session is entered and exited by its own owner task. The SDK's
``ClientSession`` opens a task group on enter; leaving it from any other
task unwinds the wrong cancel scope and corrupts the nursery stack, so the
hub only ever *asks* an owner to close (an event), or cancels the owner's
own scope while a start is still in progress, and lets the owner do it.

A call ends in one of a few outcomes that each mean one thing (see
:meth:`Hub.call`): above all, "the request never left" (``NotSentError``)
is kept apart from "it left and no usable answer came back"
(``NoReplyError``), because for an effect the first is nothing and the
second is doubt. The SDK alone cannot tell them apart, nor a server's own
-32000 error from a closed connection; the transport (``tools/stdio.py`` for
a server started here, ``tools/http.py`` for one reached by URL) notes what
it wrote and read for each call, and the hub judges by that.

A server's configuration may hold ``${VAR}``: each is taken from the
environment once, when the hub opens (:meth:`ServerConfig.resolve`), and
only what starts or reaches the server sees the values. Every message the
hub writes shows the configuration as written, any text that may carry a
value anyway (a server's stderr, an exception) is masked first, and so is
every message a server sends, where the transport receives it
(``vodou_engine/masking.py``). The transport also bounds each message by the
server's ``maxMessageBytes``; one over it ends the session (:meth:`Hub.call`
says so, naming the setting).

The MCP SDK costs about a second to import. It is imported inside the
functions that start servers and call tools, never at module level, so
commands that only compile or inspect recipes do not pay for it; and it is
imported after the server processes are spawned (``tools/stdio.py``), so
its import overlaps the servers' own start.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

import msgspec
import trio

from vodou_engine.errors import (
    NoReplyError,
    NotSentError,
    ServerConfigError,
    ServerStartError,
    ToolError,
    UnknownToolError,
)
from vodou_engine.limits import MAX_MESSAGE_BYTES, check_json_depth, check_value_depth, size_words
from vodou_engine.servers import HTTP, ResolvedServer, ServerConfig, unknown_server_error

if TYPE_CHECKING:
    from mcp.client.session import ClientSession

    from vodou_engine.tools.process import Prespawned
    from vodou_engine.tools.stdio import ServerProcess, Wire
    from mcp_types import CallToolResult, Tool

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_START_TIMEOUT", "Hub", "ToolInfo", "ToolResult", "open_hub"]

logger = logging.getLogger(__name__)

DEFAULT_START_TIMEOUT = 20.0
"""Seconds a server gets to spawn, answer ``initialize`` and list its tools,
unless its ``startTimeout`` (or ``open_hub(start_timeout=...)``) says otherwise."""

DEFAULT_CALL_TIMEOUT = 120.0
"""Seconds a tool call may take, unless the server's ``callTimeout`` (or
``Hub.call(timeout=...)``) says otherwise. Every call has a limit: a server
that never answers must not hold a run forever."""

_EXIT_STATUS_WAIT_S = 0.5
"""How long a failed call waits for a server whose output ended to exit, so the
error can give its exit status; the process normally exits with its output."""

STDERR_TAIL_LINES = 20
_STDERR_TAIL_BYTES = 64 * 1024


class ToolInfo(msgspec.Struct, frozen=True):
    """What a server says about one tool.

    The behaviour hints stay ``None`` when the server leaves them unset, so a
    caller can tell "the server said false" from "the server said nothing" and
    apply the spec's defaults (read-only false, destructive true, idempotent
    false, open-world true) itself.
    """

    name: str
    description: str = ""
    input_schema: dict[str, Any] = {}
    read_only: bool | None = None
    destructive: bool | None = None
    idempotent: bool | None = None
    title: str | None = None
    open_world: bool | None = None
    output_schema: dict[str, Any] | None = None


class ToolResult(msgspec.Struct):
    """The outcome of one tool call that reached the server and got an answer.

    ``value`` is what downstream steps consume: the structured content when
    the server sends one, else the text block(s) decoded as JSON where they
    are JSON, else the text. ``text`` is always the plain text, for people and
    for error messages. A tool that failed is ``is_error=True`` rather than an
    exception because whether a failed step stops the run is the engine's
    decision, not the transport's. ``error_code`` is set when the server
    refused the request at the protocol level (a JSON-RPC error) instead of
    returning a tool result.
    """

    value: Any
    is_error: bool
    text: str
    duration_s: float
    error_code: int | None = None


class _Server:
    """A server from spawn (or first request) to exit; callers only read it, its owner task alone closes it."""

    def __init__(self, name: str, resolved: ResolvedServer, stderr: IO[bytes] | None):
        self.name = name
        self.config = resolved.template
        """As written (``${VAR}`` unexpanded): what every message shows."""
        self.resolved = resolved
        self.stderr = stderr
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


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(_leaves(inner))
        return out
    return [exc]


def _is_cancellation(exc: BaseException) -> bool:
    return any(isinstance(leaf, trio.Cancelled) for leaf in _leaves(exc))


def _leaf_text(exc: BaseException) -> str:
    leaf = _leaves(exc)[0]
    text = str(leaf).strip().splitlines()
    if not text:
        return type(leaf).__name__
    # The SDK raises plain RuntimeErrors with full sentences; other types say something by their name.
    return text[0] if type(leaf) is RuntimeError else f"{type(leaf).__name__}: {text[0]}"


def _import_http() -> None:
    from ..gcpause import paused_for_import

    with paused_for_import():
        from . import http

        http._import_sdk()


def _tool_info(tool: Tool) -> ToolInfo:
    ann = tool.annotations
    return ToolInfo(
        name=tool.name,
        description=tool.description or "",
        input_schema=dict(tool.input_schema or {}),
        read_only=ann.read_only_hint if ann else None,
        destructive=ann.destructive_hint if ann else None,
        idempotent=ann.idempotent_hint if ann else None,
        title=tool.title or (ann.title if ann else None),
        open_world=ann.open_world_hint if ann else None,
        output_schema=tool.output_schema,
    )


def _maybe_json(text: str) -> Any:
    """The text decoded as JSON where it is JSON, else the text itself.

    Raises ``limits.TooDeep`` for JSON nested deeper than ``limits.MAX_DEPTH``:
    such a value would break whatever handles it later (a recursion limit,
    far from the server that sent it), so it is refused here, at the door.
    """
    if text.lstrip()[:1] in ("[", "{"):  # only an array or object can nest
        check_json_depth(text)
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError:
        return text


def _to_result(result: CallToolResult, duration: float) -> ToolResult:
    """Raises ``limits.TooDeep`` when the result nests deeper than ``limits.MAX_DEPTH``."""
    texts: list[str] = []
    others: list[Any] = []
    for block in result.content:
        if getattr(block, "type", None) == "text":
            texts.append(block.text)
        else:
            others.append(block.model_dump(mode="json", by_alias=True, exclude_none=True))
    for other in others:
        check_value_depth(other)
    if result.structured_content is not None:
        check_value_depth(result.structured_content)
        value: Any = result.structured_content
    elif texts:
        parsed = [_maybe_json(t) for t in texts]
        value = parsed[0] if len(parsed) == 1 else parsed
    else:
        # Only images/resources: hand them on as their JSON form rather than dropping them.
        value = others or None
    return ToolResult(value=value, is_error=bool(result.is_error), text="\n".join(texts), duration_s=duration)


def _client_info() -> Any:
    from importlib.metadata import PackageNotFoundError, version

    from mcp_types import Implementation

    try:
        v = version("vodou_engine")
    except PackageNotFoundError:  # pragma: no cover - running from a bare checkout
        v = "0"
    return Implementation(name="vodou-engine", version=v)


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


class Hub:
    """One session per server for a whole run, so steps never pay a server's start-up twice.

    Obtained from :func:`open_hub`, which owns the sessions' lifetimes.
    """

    def __init__(
        self,
        configs: Mapping[str, ServerConfig],
        names: list[str],
        start_timeout: float | None = None,
        prespawned: Prespawned | None = None,
        environ: Mapping[str, str] | None = None,
    ):
        """Raises ServerConfigError, before anything starts, for a server whose ``${VAR}``
        cannot be resolved from ``environ`` (default: this process's environment)."""
        self._prespawned = prespawned
        self._configs = dict(configs)
        self._names = names
        self._resolved = {name: self._configs[name].resolve(name, environ) for name in names if name in self._configs}
        self._start_timeout = start_timeout
        self._servers: dict[str, _Server] = {}
        self._closed = False
        self.started_in: dict[str, float] = {}
        """Seconds from spawn to a complete tool listing, per server: start-up is the
        dominant fixed cost of a run, so it is reported separately from call times."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(n for n in self._names if n in self._servers)

    def config(self, server: str) -> ServerConfig:
        return self._server(server).config

    def tools(self, server: str) -> dict[str, ToolInfo]:
        return dict(self._server(server).tools)

    def tool(self, server: str, tool: str) -> ToolInfo:
        srv = self._server(server)
        try:
            return srv.tools[tool]
        except KeyError:
            raise self._unknown_tool(srv, tool) from None

    def call_timeout(self, server: str) -> float:
        """Seconds a call to ``server`` may take when the caller names no timeout:
        its ``callTimeout``, else DEFAULT_CALL_TIMEOUT."""
        config = self._server(server).config
        return config.call_timeout if config.call_timeout is not None else DEFAULT_CALL_TIMEOUT

    async def call(
        self,
        server: str,
        tool: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        timeout: float | None = None,
    ) -> ToolResult:
        """Call one tool; safe to run many at once, on one server or several.

        Every call ends in exactly one of these, and each means one thing:

        * ``NotSentError`` (or its kinds ``UnknownToolError``, ``ServerStartError``):
          the request never left this process (the server did not start, is
          known to have stopped, or does not list the tool; or the arguments
          could not be encoded). Nothing can have happened on the server.
        * ``NoReplyError``: the request may have reached the server, but no
          well-formed reply came back: the connection closed or the server
          exited mid-call, the call timed out, the reply was cut off, could
          not be parsed, failed validation (the tool's own output schema
          included), or nests deeper than ``limits.MAX_DEPTH``. The tool may
          or may not have run: for an effect this is doubt, never failure.
        * a :class:`ToolResult` with ``is_error=True`` and ``error_code`` set:
          the live server refused the request with a JSON-RPC error (any
          code, -32000 included: what tells a server's error from a dropped
          connection is what the transport saw, not the number).
        * a :class:`ToolResult` with ``is_error=True`` and no ``error_code``:
          the tool ran and reported failure (``isError: true``).
        * a :class:`ToolResult` with ``is_error=False``: success.

        ``timeout`` (seconds) wins over the server's ``callTimeout``, which wins
        over DEFAULT_CALL_TIMEOUT; ``math.inf`` waits for ever. A call that runs
        out of time is cancelled on the server (``notifications/cancelled``) and
        the session stays usable. Cancelling the caller does the same and
        raises trio's Cancelled as usual; a server left working on a call
        nobody waits for is stopped without the usual grace when the hub closes.
        """
        from mcp.shared.exceptions import MCPError

        from . import stdio

        srv = self._server(server)
        if not srv.ready.is_set():  # a hub opened with wait=False
            await srv.ready.wait()
        if srv.start_error is not None:
            raise srv.start_error
        if tool not in srv.tools:
            raise self._unknown_tool(srv, tool)
        if self._closed or srv.closed or srv.session is None or srv.wire is None:
            reason = srv.failure or "the hub is closed"
            raise NotSentError(
                srv.mask(f"{server}.{tool} was not sent: MCP server {server!r} is not running ({reason})"), server=server, tool=tool
            )
        wire = srv.wire
        if wire.gone:
            raise await self._not_sent(srv, tool)

        limit = timeout if timeout is not None else self.call_timeout(server)
        watch = stdio.CallWatch()
        error: BaseException | None = None
        result: CallToolResult | None = None
        started = time.perf_counter()
        token = stdio.CURRENT_CALL.set(watch)
        try:
            with trio.CancelScope(deadline=trio.current_time() + limit if math.isfinite(limit) else math.inf) as scope:
                watch.scope = scope
                try:
                    result = await srv.session.call_tool(tool, dict(arguments or {}))
                except Exception as exc:
                    error = exc
        finally:
            stdio.CURRENT_CALL.reset(token)
            wire.finish(watch)
        elapsed = time.perf_counter() - started

        if scope.cancelled_caught:
            if not watch.may_have_left:
                why = f"it could not be sent within {limit:g} s" + (f" ({watch.lost})" if watch.lost else "")
                raise await self._not_sent(srv, tool, why)
            if wire.overflow is not None:
                raise self._too_large(srv, tool)
            if watch.bad_reply is not None:
                raise self._no_reply(srv, tool, f"its reply could not be read: {watch.bad_reply}")
            raise self._timed_out(srv, tool, limit, explicit=timeout is not None)
        if error is not None:
            if not watch.may_have_left:
                if watch.lost is not None:
                    why: str | None = watch.lost
                else:
                    why = None if wire.gone else f"it could not be sent ({_leaf_text(error)})"
                raise await self._not_sent(srv, tool, why) from error
            if isinstance(error, MCPError) and watch.error_reply:
                return ToolResult(value=None, is_error=True, text=error.message, duration_s=elapsed, error_code=error.code)
            if wire.overflow is not None:
                raise self._too_large(srv, tool) from error
            if isinstance(error, MCPError):
                # No error reply came for this call: the SDK made this one up (the connection
                # closed, an HTTP request failed); the transport noted what really happened.
                if watch.bad_reply is not None:
                    what = f"its reply could not be read: {watch.bad_reply}"
                elif watch.lost is not None:
                    what = watch.lost
                else:
                    what = await self._ending(srv) if wire.gone else f"the connection failed ({error.message})"
                raise self._no_reply(srv, tool, what) from error
            # Output-schema mismatch, a result of the wrong shape, an input_required or
            # extension result we did not ask for: a reply came, but nothing usable.
            raise self._no_reply(srv, tool, f"its reply was not usable: {_leaf_text(error)}") from error
        assert result is not None
        try:
            return _to_result(result, elapsed)
        except Exception as exc:  # limits.TooDeep, or a content block that will not serialise
            raise self._no_reply(srv, tool, f"its result was refused: {exc}") from exc

    # -- internals ----------------------------------------------------------

    def _server(self, server: str) -> _Server:
        srv = self._servers.get(server)
        if srv is not None:
            return srv
        if server not in self._configs:
            raise unknown_server_error(server, self._configs)
        raise ServerConfigError(
            f"MCP server {server!r} is configured but was not started for this run; started: "
            + (", ".join(self._servers) or "(none)"),
            hint="name it in open_hub(..., names) together with the others",
        )

    def _unknown_tool(self, srv: _Server, tool: str) -> UnknownToolError:
        import difflib

        listed = sorted(srv.tools)
        close = difflib.get_close_matches(tool, listed, n=1)
        return UnknownToolError(
            f"MCP server {srv.name!r} has no tool {tool!r}; it lists: {', '.join(listed) or '(none)'}",
            hint=f"did you mean {close[0]!r}?" if close else None,
        )

    def _start_timeout_for(self, config: ServerConfig) -> float:
        if self._start_timeout is not None:
            return self._start_timeout
        return config.start_timeout if config.start_timeout is not None else DEFAULT_START_TIMEOUT

    def _details(self, srv: _Server, message: str) -> str:
        """The command and the stderr tail (the URL, for an HTTP server), for a server that has stopped."""
        if srv.is_http:
            return message + f"\n  url: {srv.config.url}"
        message += f"\n  command: {srv.config.command_line()}"
        tail = srv.stderr_tail()
        if tail:
            message += "\n  stderr (last lines):\n" + "\n".join(f"    {line}" for line in tail)
        return message

    async def _exit_status(self, srv: _Server) -> str | None:
        process = srv.process
        if process is None:
            return None
        if process.returncode is None:
            # Its output has ended; the exit itself is normally a moment behind.
            with trio.move_on_after(_EXIT_STATUS_WAIT_S):
                await process.wait()
        code = process.returncode
        if code is None:
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"it was killed by {name}"
        return f"it exited with status {code}"

    async def _ending(self, srv: _Server) -> str:
        """How the connection to a server that stopped answering ended, as far as the transport saw."""
        wire = srv.wire
        if wire is not None and wire.overflow is not None:
            return self._overflow_words(srv)
        if srv.is_http:
            return wire.ending() if wire is not None else "the session ended"  # type: ignore[attr-defined]
        status = await self._exit_status(srv)
        if wire is not None and wire.cut_off:
            what = f"its output ended in the middle of a line ({wire.cut_off} bytes): the reply was cut off"
            return f"{what}; {status}" if status else what
        if status is not None:
            return status
        if wire is not None and wire.write_failed and not wire.eof:
            return "its input pipe broke"
        return "it closed its output"

    def _overflow_words(self, srv: _Server, who: str = "it") -> str:
        return (
            f"{who} sent a message larger than {size_words(srv.limit)} (its \"maxMessageBytes\"), which was not read; "
            "nothing more is read from it and its session was closed"
        )

    def _overflow_hint(self, srv: _Server) -> str:
        return f'raise "maxMessageBytes" for server {srv.name!r} in the server file (now {srv.limit} bytes), or check the server'

    def _too_large(self, srv: _Server, tool: str) -> NoReplyError:
        message = f"no usable reply from MCP server {srv.name!r} to {tool}: {self._overflow_words(srv)}"
        return NoReplyError(srv.mask(message), hint=self._overflow_hint(srv), server=srv.name, tool=tool, limit=srv.limit)

    def _no_reply(self, srv: _Server, tool: str, what: str) -> NoReplyError:
        message = f"no usable reply from MCP server {srv.name!r} to {tool}: {what}"
        if srv.wire is not None and srv.wire.gone:
            message = self._details(srv, message)
        return NoReplyError(srv.mask(message), server=srv.name, tool=tool)

    async def _not_sent(self, srv: _Server, tool: str, why: str | None = None) -> NotSentError:
        """``why`` is what stopped the request; by default, how the server ended."""
        if why is None:
            if srv.wire is not None and srv.wire.overflow is not None:
                message = f"{srv.name}.{tool} was not sent: {self._overflow_words(srv, f'MCP server {srv.name!r}')}"
                return NotSentError(srv.mask(message), hint=self._overflow_hint(srv), server=srv.name, tool=tool)
            if srv.is_http:
                why = f"the session with MCP server {srv.name!r} has ended: {await self._ending(srv)}"
            else:
                why = f"MCP server {srv.name!r} is not running: {await self._ending(srv)}"
        message = f"{srv.name}.{tool} was not sent: {why}"
        if srv.wire is not None and srv.wire.gone:
            message = self._details(srv, message)
        return NotSentError(srv.mask(message), server=srv.name, tool=tool)

    def _timed_out(self, srv: _Server, tool: str, limit: float, *, explicit: bool) -> NoReplyError:
        wire = srv.wire
        seen = []
        if wire is not None and wire.unfinished:
            seen.append(f"{wire.unfinished} bytes of a line arrived without its end: the reply may have been cut off")
        if wire is not None and wire.stray_ids:
            seen.append(f"it sent a reply with id {wire.stray_ids[-1]!r}, which matches no request")
        if wire is not None and wire.bad_lines:
            seen.append(f"it sent {wire.bad_lines} line(s) that are not JSON-RPC ({wire.last_bad_line})")
        message = f"{srv.name}.{tool} did not answer within {limit:g} s; the request was cancelled"
        if seen:
            message += "\n  " + "\n  ".join(seen)
        if explicit:
            hint = f'this call was given {limit:g} s, which overrides "callTimeout" for server {srv.name!r} in the server file'
        else:
            hint = f'raise "callTimeout" for server {srv.name!r} in the server file (now {limit:g} s), or check the server'
        return NoReplyError(srv.mask(message), hint=hint, server=srv.name, tool=tool, timeout=limit)

    def _start_error(self, srv: _Server, exc: BaseException) -> ServerStartError:
        error = self._http_start_error(srv, exc) if srv.is_http else self._stdio_start_error(srv, exc)
        error.message = srv.mask(error.message)
        error.args = (error.message,)
        error.server = srv.name  # type: ignore[attr-defined]
        return error

    def _http_start_error(self, srv: _Server, exc: BaseException) -> ServerStartError:
        sdk = sys.modules.get("mcp.shared.exceptions")
        MCPError = getattr(sdk, "MCPError", ()) if sdk else ()
        CONNECTION_CLOSED = getattr(sys.modules.get("mcp_types"), "CONNECTION_CLOSED", None)
        cause = _leaves(exc)[0]
        url = srv.config.url
        failure = getattr(srv.link, "last_failure", None)
        hint = f'check that the server is up and that "url" is right ({url}), e.g. with curl'
        if srv.link is not None and srv.link.overflow is not None:
            reason, hint = self._overflow_words(srv), self._overflow_hint(srv)
        elif isinstance(cause, trio.TooSlowError):
            limit = self._start_timeout_for(srv.config)
            reason = f"it did not finish initializing within {limit:g} s"
            hint = f'raise "startTimeout" for server {srv.name!r} in the server file (now {limit:g} s), or check the server'
        elif failure is not None:
            reason = failure
            if " 401" in failure or " 403" in failure:
                hint = f'check the credentials in "headers" for server {srv.name!r} (their ${{VAR}} values come from your environment)'
        elif isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED:
            reason = "the connection closed before it answered initialize"
        elif isinstance(cause, MCPError):
            reason = f"it refused to initialize: {cause.message}"
        else:
            reason = _leaf_text(cause)
        lines = [f"MCP server {srv.name!r} failed to start: {reason}", f"  url: {url}"]
        return ServerStartError("\n".join(lines), hint=hint)

    def _stdio_start_error(self, srv: _Server, exc: BaseException) -> ServerStartError:
        name, config, stderr = srv.name, srv.config, srv.stderr
        # Only a start that got as far as the handshake has loaded the SDK; a spawn
        # that failed must not pay a second to import it just to word the error.
        sdk = sys.modules.get("mcp.shared.exceptions")
        MCPError = getattr(sdk, "MCPError", ()) if sdk else ()
        CONNECTION_CLOSED = getattr(sys.modules.get("mcp_types"), "CONNECTION_CLOSED", None)

        leaves = _leaves(exc)
        cause = leaves[0]
        hint = f"run it by hand to see what it prints: {config.command_line()}"
        if srv.link is not None and srv.link.overflow is not None:
            reason, hint = self._overflow_words(srv), self._overflow_hint(srv)
        elif isinstance(cause, FileNotFoundError):
            if config.cwd and not os.path.isdir(config.cwd):
                reason = f"its working directory {config.cwd} does not exist"
            else:
                reason = f"command not found: {config.command}"
                hint = "check \"command\" in the server file; use an absolute path if it is not on PATH"
        elif isinstance(cause, PermissionError):
            reason = f"permission denied running {config.command}"
        elif isinstance(cause, OSError):
            reason = f"cannot run {config.command}: {cause.strerror or cause}"
        elif isinstance(cause, trio.TooSlowError):
            limit = self._start_timeout_for(config)
            reason = f"it did not finish initializing within {limit:g} s"
            hint = (
                f'raise "startTimeout" for server {name!r} in the server file (now {limit:g} s): '
                "a slow first start (downloads, caches) may need more"
            )
        elif isinstance(cause, MCPError) and cause.code == CONNECTION_CLOSED:
            reason = "it exited, or closed its output, before answering initialize"
        elif isinstance(cause, MCPError):
            reason = f"it refused to initialize: {cause.message}"
        else:
            reason = f"{type(cause).__name__}: {cause}"
        lines = [f"MCP server {name!r} failed to start: {reason}", f"  command: {config.command_line()}"]
        if config.cwd:
            lines.append(f"  cwd: {config.cwd}")
        tail = srv.stderr_tail()
        if tail:
            lines.append("  stderr (last lines):")
            lines.extend(f"    {line}" for line in tail)
        else:
            lines.append("  stderr: (empty)")
        return ServerStartError("\n".join(lines), hint=hint)

    async def _own(self, name: str, config: ServerConfig, spawned: trio.Event) -> None:
        """Spawns (or reaches), connects and finally closes one server, all in this task (see the module docstring).

        ``spawned`` is set once the process exists (or could not be made; at once for an
        HTTP server), before the SDK is imported, so a caller can go on with its own work
        while the server boots.
        """
        import tempfile
        from contextlib import nullcontext

        resolved = self._resolved[name]
        adopted = None
        if config.transport == HTTP:
            stderr_file: Any = nullcontext(None)
            clock = time.perf_counter()
        else:
            adopted = self._prespawned.take(name) if self._prespawned is not None else None
            if adopted is not None:
                popen, stderr_file, clock = adopted
            else:
                stderr_file, clock = tempfile.TemporaryFile(prefix=f"vodou-{name}-", suffix=".stderr"), time.perf_counter()
        with stderr_file as stderr:
            srv = _Server(name, resolved, stderr)
            # Registered at once, so closing the hub reaches a start still in progress.
            self._servers[name] = srv
            try:
                with srv.owner_scope:
                    async with self._streams(srv, adopted[0] if adopted is not None else None, spawned) as (read, write, wire):
                        srv.link = wire
                        from mcp.client.session import ClientSession

                        async with ClientSession(read, write, client_info=_client_info()) as session:
                            with trio.fail_after(self._start_timeout_for(config)):
                                await session.initialize()
                                tools = await _list_all_tools(session)
                            srv.wire = wire
                            srv.session = session
                            srv.tools = {t.name: _tool_info(t) for t in tools}
                            self.started_in[name] = time.perf_counter() - clock
                            srv.ready.set()
                            await srv.close_requested.wait()
            except BaseException as exc:
                if not srv.ready.is_set():
                    if _is_cancellation(exc) or isinstance(exc, KeyboardInterrupt):
                        raise
                    srv.start_error = self._start_error(srv, exc)
                    srv.start_error.__cause__ = _leaves(exc)[0]
                    return
                if _is_cancellation(exc) or isinstance(exc, KeyboardInterrupt):
                    raise
                # After start a crashed session must not take the whole run down:
                # remember why, and let the next call to this server say so.
                srv.failure = srv.mask(f"{type(_leaves(exc)[0]).__name__}: {_leaves(exc)[0]}")
                logger.warning("MCP server %r session ended with an error: %s", name, srv.failure)
            finally:
                srv.closed = True
                srv.ready.set()  # nobody waits forever on a server that is gone

    @asynccontextmanager
    async def _streams(self, srv: _Server, popen: Any, spawned: trio.Event) -> AsyncIterator[tuple[Any, Any, Any]]:
        """The session's message streams and the transport's wire: a process started here
        (``popen``: one started before trio, taken over), or an HTTP session."""
        if srv.is_http:
            spawned.set()  # nothing to spawn: the first request is the start
            if "vodou_engine.tools.http" not in sys.modules:  # httpx2 and the SDK: off the trio thread
                await trio.to_thread.run_sync(_import_http)
            from . import http

            async with http.session_streams(srv.resolved.config, srv.config.url or "", limit=srv.limit, masking=srv.resolved.masking) as streams:
                yield streams
            return
        from . import stdio

        try:
            process = stdio.ServerProcess(popen) if popen is not None else await stdio.spawn(srv.resolved.config, srv.stderr)  # type: ignore[arg-type]
            srv.process = process
        finally:
            spawned.set()
        async with stdio.session_streams(process, limit=srv.limit, masking=srv.resolved.masking) as streams:
            yield streams

    async def _spawn_all(self, owners: trio.Nursery) -> None:
        """Start every owner and return once every process exists: the handshakes go on behind."""
        events = []
        for name in self._names:
            spawned = trio.Event()
            events.append(spawned)
            owners.start_soon(self._own, name, self._configs[name], spawned)
        for spawned in events:
            await spawned.wait()

    async def wait_ready(self) -> None:
        """Wait until every server answers, or raise ServerStartError for those that failed.

        When one fails the others' starts are abandoned at once rather than
        waited out; the hub is then closed and cannot be used.
        """
        if all(srv.ready.is_set() and srv.start_error is None for srv in self._servers.values()) and not self._closed:
            return
        with trio.CancelScope() as watching:
            async with trio.open_nursery() as waiting:

                async def watch(srv: _Server) -> None:
                    await srv.ready.wait()
                    if srv.start_error is not None:
                        self._request_close()
                        watching.cancel()

                for srv in list(self._servers.values()):
                    waiting.start_soon(watch, srv)
        failures = [srv.start_error for srv in self._servers.values() if srv.start_error is not None]
        if not failures:
            if self._closed:
                raise ToolError("the MCP hub was closed before its servers were ready")
            return
        # Let the abandoned starts finish unwinding (their processes stopped) before reporting.
        for srv in self._servers.values():
            if not srv.closed:
                await srv.ready.wait()
        if len(failures) == 1:
            raise failures[0]
        err = ServerStartError(
            f"{len(failures)} MCP servers failed to start:\n" + "\n".join(f.message for f in failures),
            hint=failures[0].hint,
        )
        err.server = getattr(failures[0], "server", None)  # type: ignore[attr-defined]
        raise err

    def _request_close(self) -> None:
        self._closed = True
        for srv in self._servers.values():
            if srv.ready.is_set():
                srv.close_requested.set()
            else:
                srv.owner_scope.cancel()


@asynccontextmanager
async def open_hub(
    servers: Mapping[str, ServerConfig],
    names: Iterable[str],
    *,
    start_timeout: float | None = None,
    wait: bool = True,
    prespawned: Prespawned | None = None,
    environ: Mapping[str, str] | None = None,
) -> AsyncIterator[Hub]:
    """Start the named servers (each once, in parallel) and close them all on exit.

    Raises ServerConfigError before anything starts if a name is not
    configured, or a ``${VAR}`` of one of them is not set in ``environ``
    (default: this process's environment); and ServerStartError if any
    server fails to start; servers
    that did start are closed first. Each server gets ``start_timeout``
    seconds to start if given, else its own ``startTimeout``, else
    DEFAULT_START_TIMEOUT. With ``wait=False`` the hub is handed
    over as soon as the processes exist, and ``await hub.wait_ready()`` is
    where that error surfaces: the caller's own work then overlaps the
    servers' start. Servers in ``prespawned`` (started before trio was
    imported) are taken over instead of started again. On exit every session
    is closed by its owner and every server process has ended.
    """
    wanted = list(dict.fromkeys(names))
    for name in wanted:
        if name not in servers:
            raise unknown_server_error(name, servers)

    hub = Hub(servers, wanted, start_timeout, prespawned, environ)
    error: BaseException | None = None
    async with trio.open_nursery() as owners:
        try:
            await hub._spawn_all(owners)
            if wait:
                await hub.wait_ready()
            yield hub
        except GeneratorExit:  # pragma: no cover - generator finalized without aclose
            hub._request_close()
            raise
        except BaseException as exc:
            # Raised again below, outside the nursery, so callers get their own
            # exception back instead of one wrapped in an ExceptionGroup.
            error = exc
        finally:
            hub._request_close()
    if error is not None:
        raise error
