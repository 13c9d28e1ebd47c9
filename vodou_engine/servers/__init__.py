"""Which MCP servers exist and how to start them.

The file format is the one people already keep for Claude Desktop and
similar clients, so an existing file can be pointed at as is::

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}

VS Code's ``.vscode/mcp.json`` (``{"servers": {...}}``) is read the same way.
An entry with ``"disabled": true`` is left out: it is never started, and a
recipe that names it is refused saying so (:func:`unknown_server_error`).

A server is either started here and spoken to over stdio ("command") or
reached over the spec's streamable HTTP transport ("url", with optional
"headers"); "type" may name the transport. ``${VAR}`` and ``${VAR:-default}``
in "command", "args", "env", "url" and "headers" are taken from the caller's
environment when the server starts (:meth:`ServerConfig.resolve`); ``$$`` is
a literal ``$``. Keys this engine does not use ("autoApprove", a top-level
"globalShortcut", ...) are ignored rather than rejected: the same file is
shared with other programs that put their own settings in it. Four keys are
this engine's own, all optional: "startTimeout" and "callTimeout" (seconds),
"maxMessageBytes", and "inherit" (names of the caller's variables a started
server gets).

In parts: ``config.py`` one server's configuration (:class:`ServerConfig`)
and its ``${VAR}`` values taken from the environment (:class:`ResolvedServer`);
``templates.py`` how ``${VAR}`` is written; ``file.py`` reading and checking
the server file; ``discovery.py`` which file is in effect (or the embedded
demo servers) and the error for a server that is not in it; ``needed.py``
which servers a plan calls. Every name is imported from here.

Importing this package must stay cheap (the CLI imports it for most
commands), so it depends on msgspec, the standard library and the engine's
light modules (the plan, the policy's names); the MCP SDK is imported by
the hub when servers are actually started.
"""

from __future__ import annotations

from vodou_engine.servers.config import HTTP, STDIO, ResolvedServer, ServerConfig
from vodou_engine.servers.discovery import (
    ENV_VAR,
    PROJECT_FILE,
    ServerSet,
    default_demo_db,
    demo_servers,
    load_servers,
    unknown_server_error,
    user_config_path,
)
from vodou_engine.servers.file import EMBEDDED_SOURCE, parse_server_file, parse_servers
from vodou_engine.servers.needed import servers_needed, servers_to_finish
from vodou_engine.servers.templates import parse_template, template_vars

__all__ = [
    "EMBEDDED_SOURCE",
    "ENV_VAR",
    "HTTP",
    "PROJECT_FILE",
    "STDIO",
    "ResolvedServer",
    "ServerConfig",
    "ServerSet",
    "default_demo_db",
    "demo_servers",
    "load_servers",
    "parse_server_file",
    "parse_servers",
    "parse_template",
    "servers_needed",
    "servers_to_finish",
    "template_vars",
    "unknown_server_error",
    "user_config_path",
]
