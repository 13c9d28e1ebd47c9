"""MCP glue shared by the demo servers: registration, recording, annotations.

Each demo module declares its tools as plain functions whose first parameter
is a SQLite connection. :class:`DemoServer` hides that parameter from the
tool's published input schema, and wraps the call in :func:`db.invoke`, so
every call, read or effect, is timed, recorded in the shared ``calls`` table
and (for effects) checked against its idempotency key, without each tool
repeating that code.

The wrapper is a synchronous function on purpose: the SDK runs synchronous
tools on a worker thread, so blocking work (``time.sleep`` latency, SQLite
busy waits) never stalls the server's event loop.
"""

from __future__ import annotations

import gc
import inspect
import os
import sqlite3
import typing
from collections.abc import Callable
from typing import Any

# Only a server process imports this module, and the SDK's import below (with
# the tool registrations that follow it) is most of the server's start: the
# collector stays paused until run() freezes what exists, about a fifth of
# the start saved. See vodou_engine.gcpause for the same in the CLI.
gc.disable()

from mcp.server.mcpserver import MCPServer  # noqa: E402 - after gc.disable() above
from mcp.server.mcpserver.exceptions import ToolError  # noqa: E402 - after gc.disable() above
from mcp.types import ToolAnnotations  # noqa: E402 - after gc.disable() above

from vodou_engine.demo import db  # noqa: E402 - after gc.disable() above

READ_ONLY = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)

_KEY = "idempotency_key"


class DemoServer:
    """An ``MCPServer`` whose tools are recorded in the shared demo database."""

    def __init__(self, name: str, instructions: str | None = None) -> None:
        self.name = name
        self.db_path = db.db_path_from_env()
        self.latency = db.parse_latency(os.environ.get(db.LATENCY_ENV))
        self.mcp = MCPServer(name, instructions=instructions, log_level="WARNING")

    def read(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a read-only tool (``readOnlyHint=True``)."""
        return self._register(name, READ_ONLY, effect=False)

    def effect(self, name: str, *, destructive: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a tool that changes the world; it must accept ``idempotency_key``."""
        return self._register(name, DESTRUCTIVE if destructive else WRITE, effect=True)

    def _register(
        self, name: str, annotations: ToolAnnotations, *, effect: bool
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.mcp.add_tool(self._wrap(name, fn, effect), name=name, annotations=annotations)
            return fn

        return decorator

    def _wrap(self, tool: str, fn: Callable[..., Any], effect: bool) -> Callable[..., Any]:
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        conn_param, *params = sig.parameters.values()
        params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in params]
        if effect and _KEY not in {p.name for p in params}:
            raise TypeError(f"effect tool {tool} must take an {_KEY} parameter")

        def call(**kwargs: Any) -> Any:
            key = kwargs.get(_KEY)
            arguments = {k: v for k, v in kwargs.items() if k != _KEY}
            try:
                return db.invoke(
                    self.db_path,
                    server=self.name,
                    tool=tool,
                    arguments=arguments,
                    body=lambda conn: fn(conn, **kwargs),
                    effect=effect,
                    idempotency_key=key,
                    latency=db.latency_for(self.latency, tool),
                )
            except db.DemoError as exc:
                # ToolError is the SDK's "anticipated failure": its text reaches the
                # client in an is_error result. Any other exception is reported
                # only as "Error executing tool <name>".
                raise ToolError(str(exc)) from exc

        # The SDK derives the input schema from the signature and the output
        # schema from the return annotation; publish fn's, minus the connection.
        call.__name__ = fn.__name__
        call.__qualname__ = fn.__qualname__
        call.__module__ = fn.__module__
        call.__doc__ = fn.__doc__
        call.__signature__ = sig.replace(  # type: ignore[attr-defined]
            parameters=params, return_annotation=hints.get("return", sig.return_annotation)
        )
        call.__annotations__ = {k: v for k, v in hints.items() if k != conn_param.name}
        return call

    def run(self) -> None:
        """Seed the database if needed, then serve over stdio until stdin closes."""
        db.ensure_seeded(self.db_path)
        # The SDK's import builds a very large graph of pydantic models; the
        # collector's passes over it, while serving and at interpreter exit
        # (~0.4 s per server shutdown), would only find it alive. Everything
        # alive now lives until exit anyway, so move it out of the collector's
        # view, then let the collector run for what serving creates.
        gc.freeze()
        gc.enable()
        try:
            self.mcp.run()
        except KeyboardInterrupt:
            pass


Conn = sqlite3.Connection
"""The type of every demo tool's first parameter (hidden from the MCP schema)."""

__all__ = ["DESTRUCTIVE", "READ_ONLY", "WRITE", "Conn", "DemoServer"]
