"""What a call or a start that went wrong is reported as, in words a person can act on.

``Hub.call`` decides which outcome a call ended in (docs/safety.md, "What an
effect's outcome is recorded as"); this module words it, from what the
transport saw: the error a call raises (``NotSentError``, ``NoReplyError``,
``UnknownToolError``) and the ``ServerStartError`` of a server that did not
start. Each names the server and the tool, says how the connection ended
(an exit status, a signal, output cut off mid-line, a message over
``maxMessageBytes``) and what to change, and is masked: no ``${VAR}`` value
a server was given shows in it.

The MCP SDK's error type is read only when the SDK is already loaded: a
spawn that failed must not pay a second to import it just to word the error.
"""

from __future__ import annotations

import difflib
import os
import signal
import sys
from typing import TYPE_CHECKING, cast

import trio

from vodou_engine.errors import NoReplyError, NotSentError, ServerStartError, SignInRequiredError, UnknownToolError
from vodou_engine.limits import size_words
from vodou_engine.servers.signins import sign_in_error
from vodou_engine.tools.live import LiveServer
from vodou_engine.tools.wire import HttpWire

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

__all__ = [
    "ending",
    "is_cancellation",
    "leaf_text",
    "leaves",
    "no_reply",
    "not_sent",
    "start_error",
    "timed_out",
    "too_large",
    "unknown_tool",
]

_EXIT_STATUS_WAIT_S = 0.5
"""How long a failed call waits for a server whose output ended to exit, so the
error can give its exit status; the process normally exits with its output."""


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an exception group holds, however deeply nested; an exception alone is its own leaf."""
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for inner in exc.exceptions:
            out.extend(leaves(inner))
        return out
    return [exc]


def is_cancellation(exc: BaseException) -> bool:
    return any(isinstance(leaf, trio.Cancelled) for leaf in leaves(exc))


def leaf_text(exc: BaseException) -> str:
    leaf = leaves(exc)[0]
    text = str(leaf).strip().splitlines()
    if not text:
        return type(leaf).__name__
    # The SDK raises plain RuntimeErrors with full sentences; other types say something by their name.
    return text[0] if type(leaf) is RuntimeError else f"{type(leaf).__name__}: {text[0]}"


def unknown_tool(srv: LiveServer, tool: str) -> UnknownToolError:
    listed = sorted(srv.tools)
    close = difflib.get_close_matches(tool, listed, n=1)
    return UnknownToolError(
        f"MCP server {srv.name!r} has no tool {tool!r}; it lists: {', '.join(listed) or '(none)'}",
        hint=f"did you mean {close[0]!r}?" if close else None,
    )


def not_running(srv: LiveServer, tool: str) -> NotSentError:
    """A call to a server that is closed, or whose session ended with an error."""
    reason = srv.failure or "the hub is closed"
    return NotSentError(
        srv.mask(f"{srv.name}.{tool} was not sent: MCP server {srv.name!r} is not running ({reason})"),
        server=srv.name,
        tool=tool,
    )


async def not_sent(srv: LiveServer, tool: str, why: str | None = None) -> NotSentError:
    """``why`` is what stopped the request; by default, how the server ended."""
    if why is None:
        if srv.wire is not None and srv.wire.overflow is not None:
            message = f"{srv.name}.{tool} was not sent: {_overflow_words(srv, f'MCP server {srv.name!r}')}"
            return NotSentError(srv.mask(message), hint=_overflow_hint(srv), server=srv.name, tool=tool)
        if srv.is_http:
            why = f"the session with MCP server {srv.name!r} has ended: {await ending(srv)}"
        else:
            why = f"MCP server {srv.name!r} is not running: {await ending(srv)}"
    message = f"{srv.name}.{tool} was not sent: {why}"
    if srv.wire is not None and srv.wire.gone:
        message = _details(srv, message)
    return NotSentError(srv.mask(message), server=srv.name, tool=tool)


def no_reply(srv: LiveServer, tool: str, what: str) -> NoReplyError:
    message = f"no usable reply from MCP server {srv.name!r} to {tool}: {what}"
    if srv.wire is not None and srv.wire.gone:
        message = _details(srv, message)
    return NoReplyError(srv.mask(message), server=srv.name, tool=tool)


def too_large(srv: LiveServer, tool: str) -> NoReplyError:
    message = f"no usable reply from MCP server {srv.name!r} to {tool}: {_overflow_words(srv)}"
    return NoReplyError(srv.mask(message), hint=_overflow_hint(srv), server=srv.name, tool=tool, limit=srv.limit)


def timed_out(srv: LiveServer, tool: str, limit: float, *, explicit: bool) -> NoReplyError:
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
        hint = (
            f'this call was given {limit:g} s, which overrides "callTimeout" for server {srv.name!r} in the server file'
        )
    else:
        hint = f'raise "callTimeout" for server {srv.name!r} in the server file (now {limit:g} s), or check the server'
    return NoReplyError(srv.mask(message), hint=hint, server=srv.name, tool=tool, timeout=limit)


async def ending(srv: LiveServer) -> str:
    """How the connection to a server that stopped answering ended, as far as the transport saw."""
    wire = srv.wire
    if wire is not None and wire.overflow is not None:
        return _overflow_words(srv)
    if srv.is_http:
        return wire.ending() if isinstance(wire, HttpWire) else "the session ended"
    status = await _exit_status(srv)
    if wire is not None and wire.cut_off:
        what = f"its output ended in the middle of a line ({wire.cut_off} bytes): the reply was cut off"
        return f"{what}; {status}" if status else what
    if status is not None:
        return status
    if wire is not None and wire.write_failed and not wire.eof:
        return "its input pipe broke"
    return "it closed its output"


async def _exit_status(srv: LiveServer) -> str | None:
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


def _details(srv: LiveServer, message: str) -> str:
    """The command and the stderr tail (the URL, for an HTTP server), for a server that has stopped."""
    if srv.is_http:
        return message + f"\n  url: {srv.config.url}"
    message += f"\n  command: {srv.config.command_line()}"
    tail = srv.stderr_tail()
    if tail:
        message += "\n  stderr (last lines):\n" + "\n".join(f"    {line}" for line in tail)
    return message


def _overflow_words(srv: LiveServer, who: str = "it") -> str:
    return (
        f'{who} sent a message larger than {size_words(srv.limit)} (its "maxMessageBytes"), which was not read; '
        "nothing more is read from it and its session was closed"
    )


def _overflow_hint(srv: LiveServer) -> str:
    return f'raise "maxMessageBytes" for server {srv.name!r} in the server file (now {srv.limit} bytes), or check the server'


# -- a server that did not start ---------------------------------------------


def start_error(srv: LiveServer, exc: BaseException) -> ServerStartError:
    """Why ``srv`` did not start (``exc``: what its start raised), masked, naming it."""
    error = _http_start_error(srv, exc) if srv.is_http else _stdio_start_error(srv, exc)
    error.message = srv.mask(error.message)
    error.args = (error.message,)
    error.server = srv.name
    return error


def _sdk_error(cause: BaseException) -> tuple[int, str] | None:
    """(code, message) when ``cause`` is the SDK's ``MCPError``; None otherwise, or when the SDK is not loaded."""
    if not isinstance(cause, getattr(sys.modules.get("mcp.shared.exceptions"), "MCPError", ())):
        return None
    error = cast("MCPError", cause)  # what the isinstance above found it to be
    return error.code, error.message


def _connection_closed() -> int | None:
    """The SDK's code for a connection that closed, when the SDK is loaded."""
    code: int | None = getattr(sys.modules.get("mcp_types"), "CONNECTION_CLOSED", None)
    return code


def _http_start_error(srv: LiveServer, exc: BaseException) -> ServerStartError:
    cause = leaves(exc)[0]
    if isinstance(cause, SignInRequiredError) or (isinstance(srv.link, HttpWire) and srv.link.sign_in_refused):
        # An OAuth server without a usable sign-in: a person must sign in (tools/oauth.py).
        reason = cause.facts.get("reason") if isinstance(cause, SignInRequiredError) else "refused"
        return sign_in_error(srv.name, srv.config.url, str(reason or "refused"))
    sdk_error = _sdk_error(cause)
    url = srv.config.url
    failure = srv.link.last_failure if isinstance(srv.link, HttpWire) else None
    hint = f'check that the server is up and that "url" is right ({url}), e.g. with curl'
    if srv.link is not None and srv.link.overflow is not None:
        reason, hint = _overflow_words(srv), _overflow_hint(srv)
    elif isinstance(cause, trio.TooSlowError):
        limit = srv.start_timeout
        reason = f"it did not finish initializing within {limit:g} s"
        hint = f'raise "startTimeout" for server {srv.name!r} in the server file (now {limit:g} s), or check the server'
    elif failure is not None:
        reason = failure
        if " 401" in failure or " 403" in failure:
            hint = f'check the credentials in "headers" for server {srv.name!r} (their ${{VAR}} values come from your environment)'
    elif sdk_error is not None and sdk_error[0] == _connection_closed():
        reason = "the connection closed before it answered initialize"
    elif sdk_error is not None:
        reason = f"it refused to initialize: {sdk_error[1]}"
    else:
        reason = leaf_text(cause)
    lines = [f"MCP server {srv.name!r} failed to start: {reason}", f"  url: {url}"]
    return ServerStartError("\n".join(lines), hint=hint)


def _stdio_start_error(srv: LiveServer, exc: BaseException) -> ServerStartError:
    name, config = srv.name, srv.config
    cause = leaves(exc)[0]
    sdk_error = _sdk_error(cause)
    hint = f"run it by hand to see what it prints: {config.command_line()}"
    if srv.link is not None and srv.link.overflow is not None:
        reason, hint = _overflow_words(srv), _overflow_hint(srv)
    elif isinstance(cause, FileNotFoundError):
        if config.cwd and not os.path.isdir(config.cwd):
            reason = f"its working directory {config.cwd} does not exist"
        else:
            reason = f"command not found: {config.command}"
            hint = 'check "command" in the server file; use an absolute path if it is not on PATH'
    elif isinstance(cause, PermissionError):
        reason = f"permission denied running {config.command}"
    elif isinstance(cause, OSError):
        reason = f"cannot run {config.command}: {cause.strerror or cause}"
    elif isinstance(cause, trio.TooSlowError):
        limit = srv.start_timeout
        reason = f"it did not finish initializing within {limit:g} s"
        hint = (
            f'raise "startTimeout" for server {name!r} in the server file (now {limit:g} s): '
            "a slow first start (downloads, caches) may need more"
        )
    elif sdk_error is not None and sdk_error[0] == _connection_closed():
        reason = "it exited, or closed its output, before answering initialize"
    elif sdk_error is not None:
        reason = f"it refused to initialize: {sdk_error[1]}"
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
