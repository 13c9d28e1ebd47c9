"""The MCP client hub: one live session per server for the length of a run.

Each server named by a run is started once, all of them in parallel, and
kept until the run ends; steps then call tools over the open sessions. Each
session is owned by one task (``tools/session.py``), which alone enters and
leaves it; the hub asks it to close.

A call ends in one of a few outcomes that each mean one thing (see
:meth:`Hub.call`): above all, "the request never left" (``NotSentError``)
is kept apart from "it left and no usable answer came back"
(``NoReplyError``), because for an effect the first is nothing and the
second is doubt. The SDK alone cannot tell them apart, nor a server's own
-32000 error from a closed connection; the transport (``tools/stdio.py`` for
a server started here, ``tools/http.py`` for one reached by URL) notes what
it wrote and read for each call (``tools/wire.py``), and the hub judges by
that. ``tools/failures.py`` words each outcome that is an error,
``tools/results.py`` turns an answer into a :class:`ToolResult`.

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

import math
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import ExitStack, asynccontextmanager
from typing import IO, TYPE_CHECKING, Any

import trio

from vodou_engine.errors import ServerConfigError, ServerStartError, ToolError
from vodou_engine.servers import HTTP, ServerConfig, unknown_server_error
from vodou_engine.tools import failures, session
from vodou_engine.tools.hooks import CallHooks
from vodou_engine.tools.live import LiveServer
from vodou_engine.tools.results import ToolInfo, ToolResult
from vodou_engine.tools.results import to_result as _to_result
from vodou_engine.tools.wire import CURRENT_CALL, CallWatch

if TYPE_CHECKING:
    import subprocess

    from mcp_types import CallToolResult

    from vodou_engine.tools.process import Prespawned

__all__ = ["DEFAULT_CALL_TIMEOUT", "DEFAULT_START_TIMEOUT", "Hub", "ToolInfo", "ToolResult", "open_hub"]

DEFAULT_START_TIMEOUT = 20.0
"""Seconds a server gets to spawn, answer ``initialize`` and list its tools,
unless its ``startTimeout`` (or ``open_hub(start_timeout=...)``) says otherwise."""

DEFAULT_CALL_TIMEOUT = 120.0
"""Seconds a tool call may take, unless the server's ``callTimeout`` (or
``Hub.call(timeout=...)``) says otherwise. Every call has a limit: a server
that never answers must not hold a run forever."""


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
        self._servers: dict[str, LiveServer] = {}
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

    async def relist(self, server: str) -> None:
        """List ``server``'s tools again (``session.relist``): a warm server's listing of its start may be stale."""
        await session.relist(self._server(server))

    def tool(self, server: str, tool: str) -> ToolInfo:
        srv = self._server(server)
        try:
            return srv.tools[tool]
        except KeyError:
            raise failures.unknown_tool(srv, tool) from None

    def task_required(self, server: str) -> frozenset[str]:
        """The tools ``server`` lists as callable only as a task (this client makes none)."""
        return self._server(server).task_required

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
        hooks: CallHooks | None = None,
    ) -> ToolResult:
        """Call one tool; safe to run many at once, on one server or several.

        ``hooks``: the caller hears the server's progress on this call (a progress token
        goes with it) and answers a question the server asks while it is out
        (``tools/hooks.py``); without them, a question is declined.

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
        srv = self._server(server)
        if not srv.ready.is_set():  # a hub opened with wait=False
            await srv.ready.wait()
        if srv.start_error is not None:
            raise srv.start_error
        if tool not in srv.tools:
            raise failures.unknown_tool(srv, tool)
        if self._closed or srv.closed or srv.session is None or srv.wire is None:
            raise failures.not_running(srv, tool)
        wire = srv.wire
        if wire.gone:
            raise await failures.not_sent(srv, tool)

        limit = timeout if timeout is not None else self.call_timeout(server)
        watch = CallWatch()
        error: BaseException | None = None
        result: CallToolResult | None = None
        started = time.perf_counter()
        token = CURRENT_CALL.set(watch)
        hooks = hooks or _NO_HOOKS
        srv.calls[watch] = hooks
        on_progress = _progress_callback(hooks)
        try:
            with trio.CancelScope(deadline=trio.current_time() + limit if math.isfinite(limit) else math.inf) as scope:
                watch.scope = scope
                try:
                    result = await srv.session.call_tool(tool, dict(arguments or {}), progress_callback=on_progress)
                except Exception as exc:  # noqa: BLE001 - judged below: each failure is one of the outcomes
                    error = exc
        finally:
            srv.calls.pop(watch, None)
            CURRENT_CALL.reset(token)
            wire.finish(watch)
        elapsed = time.perf_counter() - started

        if scope.cancelled_caught:
            if not watch.may_have_left:
                why = f"it could not be sent within {limit:g} s" + (f" ({watch.lost})" if watch.lost else "")
                raise await failures.not_sent(srv, tool, why)
            if wire.overflow is not None:
                raise failures.too_large(srv, tool)
            if watch.bad_reply is not None:
                raise failures.no_reply(srv, tool, f"its reply could not be read: {watch.bad_reply}")
            raise failures.timed_out(srv, tool, limit, explicit=timeout is not None)
        if error is not None:
            # Loaded with the session: only a call that failed needs the SDK's error type.
            from mcp.shared.exceptions import MCPError

            if not watch.may_have_left:
                if watch.lost is not None:
                    unsent: str | None = watch.lost
                else:
                    unsent = None if wire.gone else f"it could not be sent ({failures.leaf_text(error)})"
                raise await failures.not_sent(srv, tool, unsent) from error
            if isinstance(error, MCPError) and watch.error_reply:
                return ToolResult(
                    value=None, is_error=True, text=error.message, duration_s=elapsed, error_code=error.code
                )
            if wire.overflow is not None:
                raise failures.too_large(srv, tool) from error
            if isinstance(error, MCPError):
                # No error reply came for this call: the SDK made this one up (the connection
                # closed, an HTTP request failed); the transport noted what really happened.
                if watch.bad_reply is not None:
                    what = f"its reply could not be read: {watch.bad_reply}"
                elif watch.lost is not None:
                    what = watch.lost
                else:
                    what = await failures.ending(srv) if wire.gone else f"the connection failed ({error.message})"
                raise failures.no_reply(srv, tool, what) from error
            # Output-schema mismatch, a result of the wrong shape, an input_required or
            # extension result we did not ask for: a reply came, but nothing usable.
            raise failures.no_reply(srv, tool, f"its reply was not usable: {failures.leaf_text(error)}") from error
        assert result is not None
        try:
            return _to_result(result, elapsed, flat=watch.flat_reply)
        except Exception as exc:  # limits.TooDeep, or a content block that will not serialise
            raise failures.no_reply(srv, tool, f"its result was refused: {exc}") from exc

    # -- internals ----------------------------------------------------------

    def _server(self, server: str) -> LiveServer:
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

    def _start_timeout_for(self, config: ServerConfig) -> float:
        if self._start_timeout is not None:
            return self._start_timeout
        return config.start_timeout if config.start_timeout is not None else DEFAULT_START_TIMEOUT

    async def _own(self, name: str, spawned: trio.Event) -> None:
        """The owner task of one server (``session.own``), with the file its stderr goes to.

        A server ``prespawned`` (started before trio was imported) is taken over, with
        its stderr file; ``spawned`` is set once the process exists (see ``session.own``).
        """
        config = self._configs[name]
        popen: subprocess.Popen[bytes] | None = None
        with ExitStack() as stack:
            stderr: IO[bytes] | None = None
            if config.transport == HTTP:
                clock = time.perf_counter()
            else:
                adopted = self._prespawned.take(name) if self._prespawned is not None else None
                if adopted is not None:
                    popen, stderr, clock = adopted
                    stack.enter_context(stderr)
                else:
                    stderr = stack.enter_context(tempfile.TemporaryFile(prefix=f"vodou-{name}-", suffix=".stderr"))
                    clock = time.perf_counter()
            srv = LiveServer(name, self._resolved[name], stderr, self._start_timeout_for(config))
            # Registered at once, so closing the hub reaches a start still in progress.
            self._servers[name] = srv

            def started(srv: LiveServer) -> None:
                self.started_in[srv.name] = time.perf_counter() - clock

            await session.own(srv, popen, spawned, started)

    async def _spawn_all(self, owners: trio.Nursery) -> None:
        """Start every owner and return once every process exists: the handshakes go on behind."""
        events = []
        for name in self._names:
            spawned = trio.Event()
            events.append(spawned)
            owners.start_soon(self._own, name, spawned)
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

                async def watch(srv: LiveServer) -> None:
                    await srv.ready.wait()
                    if srv.start_error is not None:
                        self._request_close()
                        watching.cancel()

                for srv in list(self._servers.values()):
                    waiting.start_soon(watch, srv)
        failed = [srv.start_error for srv in self._servers.values() if srv.start_error is not None]
        if not failed:
            if self._closed:
                raise ToolError("the MCP hub was closed before its servers were ready")
            return
        # Let the abandoned starts finish unwinding (their processes stopped) before reporting.
        for srv in self._servers.values():
            if not srv.closed:
                await srv.ready.wait()
        if len(failed) == 1:
            raise failed[0]
        err = ServerStartError(
            f"{len(failed)} MCP servers failed to start:\n" + "\n".join(f.message for f in failed),
            hint=failed[0].hint,
        )
        err.server = failed[0].server
        raise err

    def _request_close(self) -> None:
        self._closed = True
        for srv in self._servers.values():
            if srv.ready.is_set():
                srv.close_requested.set()
            else:
                srv.owner_scope.cancel()


_NO_HOOKS = CallHooks()


def _progress_callback(hooks: CallHooks) -> Any:
    """The SDK's progress callback for a caller that listens (a token goes with its call), else None."""
    listener = hooks.on_progress
    if listener is None:
        return None

    async def heard(progress: float, total: float | None, message: str | None) -> None:
        listener(progress, total, message)

    return heard


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
        except BaseException as exc:  # noqa: BLE001 - raised again below
            # Raised again below, outside the nursery, so callers get their own
            # exception back instead of one wrapped in an ExceptionGroup.
            error = exc
        finally:
            hub._request_close()
    if error is not None:
        raise error
