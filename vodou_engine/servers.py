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

Importing this module must stay cheap (the CLI imports it for every
command), so it depends on msgspec and the standard library only; the MCP
SDK is imported by the hub when servers are actually started.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from vodou_engine.errors import ServerConfigError
from vodou_engine.masking import Mask

if TYPE_CHECKING:
    from vodou_engine.plan import Plan

__all__ = [
    "ENV_VAR",
    "EMBEDDED_SOURCE",
    "HTTP",
    "STDIO",
    "ResolvedServer",
    "ServerConfig",
    "ServerSet",
    "default_demo_db",
    "demo_servers",
    "load_servers",
    "parse_server_file",
    "parse_servers",
    "unknown_server_error",
    "user_config_path",
]

ENV_VAR = "VODOU_SERVERS"
"""Environment variable naming a server file; beaten only by ``--servers``."""

EMBEDDED_SOURCE = "embedded defaults"

PROJECT_FILE = "mcp.json"


STDIO = "stdio"
HTTP = "http"

_TYPES = {"stdio": STDIO, "http": HTTP, "streamable-http": HTTP, "streamable_http": HTTP, "streamablehttp": HTTP}
"""Accepted values of "type" (case-insensitive), as other clients spell them."""

class ServerConfig(msgspec.Struct, omit_defaults=True):
    """How to reach one MCP server: a command started here (stdio), or a URL (streamable HTTP).

    ``env`` is laid over the SDK's minimal inherited environment (PATH, HOME,
    ...), not over the whole parent environment, so secrets in the caller's
    shell do not leak into every server by accident; ``inherit`` names the
    caller's variables a server gets besides.

    String values may hold ``${VAR}`` / ``${VAR:-default}`` (``$$`` is a
    literal ``$``): this struct keeps them as written, and that form is the
    one every message, card and binding shows. :meth:`resolve` takes the
    values from the environment when the server is started.

    ``start_timeout`` and ``call_timeout`` (JSON keys ``startTimeout`` and
    ``callTimeout``, camelCase like the rest of the file's format) are in
    seconds; unset, the hub's defaults apply (``tools.hub.DEFAULT_START_TIMEOUT``,
    ``tools.hub.DEFAULT_CALL_TIMEOUT``). ``max_message_bytes`` (``maxMessageBytes``)
    bounds what is read from the server. :func:`parse_servers` checks they are
    positive; a struct built in code is taken as it is.

    ``type`` is what the file said; :func:`parse_servers` settles the
    transport and clears it (a parsed entry has exactly one of ``command``
    and ``url``), so read :attr:`transport`, not ``type``.
    """

    command: str | None = None
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    start_timeout: float | None = msgspec.field(default=None, name="startTimeout")
    """Seconds the server gets to start (or be reached), answer ``initialize`` and list its tools."""
    call_timeout: float | None = msgspec.field(default=None, name="callTimeout")
    """Seconds one tool call may take before it is given up as unanswered (and cancelled)."""
    max_message_bytes: int | None = msgspec.field(default=None, name="maxMessageBytes")
    """The largest message read from the server (a line over stdio; an event or a body over
    HTTP), in bytes; unset, ``limits.MAX_MESSAGE_BYTES``. A larger one ends the session."""
    url: str | None = None
    """The endpoint of a streamable HTTP server."""
    headers: dict[str, str] = {}
    """HTTP headers sent with every request to ``url`` (``Authorization``, API keys...)."""
    type: str | None = None
    inherit: list[str] = []
    """Names of the caller's environment variables a started server gets, besides the minimal set."""

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"`` (an unknown ``type`` is returned as written, lower-cased)."""
        if self.type is not None:
            return _TYPES.get(self.type.strip().lower(), self.type.strip().lower())
        return HTTP if self.url and not self.command else STDIO

    def command_line(self) -> str:
        """The command as a person would type it (the URL for an HTTP server), for messages.
        Always the form written in the file: ``${VAR}`` stays ``${VAR}``."""
        if self.transport == HTTP:
            return self.url or ""
        return shlex.join([self.command or "", *self.args])

    def check(self, name: str) -> None:
        """ServerConfigError unless the transport is known and has what it needs (for a struct built in code)."""
        transport = self.transport
        if transport == HTTP:
            if not (self.url or "").strip():
                raise ServerConfigError(f"server {name!r}: an HTTP server needs \"url\"", hint=_SHAPE_HINT)
        elif transport == STDIO:
            if not (self.command or "").strip():
                raise ServerConfigError(f"server {name!r}: \"command\" is empty" if self.command is not None else f"server {name!r}: no \"command\" (or \"url\")", hint=_SHAPE_HINT)
        else:
            raise _type_error(name, self.type)

    def resolve(self, name: str, environ: Mapping[str, str] | None = None) -> ResolvedServer:
        """This server with every ``${VAR}`` taken from ``environ`` (default: this process's
        environment) and its ``inherit`` list filled in: what is actually started.

        Raises ServerConfigError (exit 2) naming the server and the variable when a
        variable without a default is not set."""
        environ = os.environ if environ is None else environ
        self.check(name)
        secrets: dict[str, str] = {}
        used: dict[str, str] = {}

        def expand(text: str, where: str, record: bool = False) -> str:
            try:
                parts = parse_template(text)
            except ValueError as exc:
                raise ServerConfigError(f"server {name!r}: {where}: {exc}", hint=_TEMPLATE_HINT) from None
            out = []
            for part in parts:
                if isinstance(part, str):
                    out.append(part)
                    continue
                var, default = part
                value = environ.get(var)
                if value is not None and (value or default is None):
                    secrets[var] = value
                elif default is not None:
                    value = default
                else:
                    raise ServerConfigError(
                        f"server {name!r}: {where} uses ${{{var}}}, and {var} is not set in the environment",
                        hint=f"set {var} before running, or give a default: ${{{var}:-value}}",
                        server=name,
                        variable=var,
                    )
                if record:
                    used[var] = value
                out.append(value)
            return "".join(out)

        if self.transport == HTTP:
            url = expand(self.url or "", '"url"', record=True)
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ServerConfigError(
                    f"server {name!r}: \"url\" must be an http:// or https:// URL ({self.url})", hint=_SHAPE_HINT
                )
            headers = {}
            for key, value in self.headers.items():
                headers[key] = expand(value, f"header {key}")
                if "\r" in headers[key] or "\n" in headers[key]:
                    raise ServerConfigError(f"server {name!r}: the value of header {key} contains a line break")
            config = msgspec.structs.replace(self, url=url, headers=headers, type=None, command=None, args=[], env={}, cwd=None, inherit=[])
        else:
            command = expand(self.command or "", '"command"', record=True)
            args = [expand(a, f"args[{i}]", record=True) for i, a in enumerate(self.args)]
            env: dict[str, str] = {}
            for var in self.inherit:
                value = environ.get(var)
                if value is not None and not value.startswith("()"):  # never hand on a bash function
                    env[var] = value
                    secrets[var] = value
            for key, value in self.env.items():
                env[key] = expand(value, f"env {key}")
            config = msgspec.structs.replace(self, command=command, args=args, env=env, type=None, url=None, headers={}, inherit=[])
        return ResolvedServer(name, self, config, used, secrets)


class ResolvedServer:
    """A server with its ``${VAR}`` values taken from the environment: what is started.

    ``config`` holds the values themselves (secrets included) and is handed
    only to what starts or reaches the server; everything shown to a person
    uses ``template`` (the configuration as written), and text that may
    carry a value anyway (a server's stderr, an exception's message) goes
    through :meth:`mask` first.
    """

    __slots__ = ("name", "template", "config", "used", "secrets", "masking")

    def __init__(self, name: str, template: ServerConfig, config: ServerConfig, used: dict[str, str], secrets: dict[str, str]):
        self.name = name
        self.template = template
        self.config = config
        self.used = used
        """``${VAR}`` in command, args and url -> the value it took (for the binding)."""
        self.secrets = secrets
        """Every value taken from the caller's environment (``${VAR}`` and ``inherit``), by variable."""
        self.masking = Mask(secrets)
        """What hides those values in everything the server sends (``vodou_engine/masking.py``)."""

    def mask(self, text: str) -> str:
        """``text`` with every value taken from the environment replaced by its ``${VAR}``."""
        return self.masking.text(text)


# -- ${VAR} -------------------------------------------------------------------

_VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_TEMPLATE_HINT = "write ${NAME} or ${NAME:-default} for a variable, and $$ for a literal $"


def parse_template(text: str) -> list[str | tuple[str, str | None]]:
    """``text`` as literal pieces and ``(variable, default or None)`` references.

    ``${NAME}``, ``${NAME:-default}`` (the default when NAME is unset or empty,
    taken as written), ``${env:NAME}`` (the spelling of VS Code and Cursor) and
    ``$$`` for a literal ``$``; any other ``$`` is itself. Raises ValueError
    saying what is wrong for an unterminated or malformed ``${``.
    """
    parts: list[str | tuple[str, str | None]] = []
    literal: list[str] = []
    i = 0
    while True:
        j = text.find("$", i)
        if j < 0:
            literal.append(text[i:])
            break
        literal.append(text[i:j])
        after = text[j + 1 : j + 2]
        if after == "$":
            literal.append("$")
            i = j + 2
            continue
        if after != "{":
            literal.append("$")
            i = j + 1
            continue
        end = text.find("}", j + 2)
        if end < 0:
            raise ValueError(f"unterminated ${{ in {text!r}")
        body = text[j + 2 : end]
        var, sep, default = body.partition(":-")
        var = var.removeprefix("env:")
        if not _VAR_NAME.match(var):
            raise ValueError(f"${{{body}}} is not a variable reference")
        if "".join(literal):
            parts.append("".join(literal))
        literal = []
        parts.append((var, default if sep else None))
        i = end + 1
    if "".join(literal):
        parts.append("".join(literal))
    return parts


def template_vars(text: str) -> list[str]:
    """The variables ``text`` refers to, in order (an invalid template refers to none)."""
    try:
        return [p[0] for p in parse_template(text) if not isinstance(p, str)]
    except ValueError:
        return []


def _type_error(name: str, value: object) -> ServerConfigError:
    shown = value if isinstance(value, str) else json_repr(value)
    if isinstance(value, str) and value.strip().lower() == "sse":
        return ServerConfigError(
            f"server {name!r}: \"type\": \"sse\" (the deprecated HTTP+SSE transport) is not supported",
            hint='use the server\'s streamable HTTP endpoint with "type": "http", or start it over stdio with "command"',
        )
    return ServerConfigError(
        f"server {name!r}: unknown \"type\" {shown!r}",
        hint='"type" is "stdio" (with "command") or "http" / "streamable-http" (with "url")',
    )


def json_repr(value: object) -> str:
    return msgspec.json.encode(value).decode()


class ServerSet(msgspec.Struct):
    """The servers in effect, and where they came from (shown in errors and `--verbose`).

    ``disabled`` names the entries the file turns off (``"disabled": true``): they
    are not in ``servers``, so nothing can start them; they are kept to say why."""

    servers: dict[str, ServerConfig]
    source: str
    disabled: list[str] = []

    def get(self, name: str) -> ServerConfig:
        try:
            return self.servers[name]
        except KeyError:
            raise self.unknown(name) from None

    def unknown(self, name: str) -> ServerConfigError:
        """The error for ``name``, which is not among the servers in effect."""
        return unknown_server_error(name, self.servers, source=self.source, disabled=self.disabled)


class _File(msgspec.Struct):
    # Servers are decoded one by one afterwards so an error can name the server.
    # "mcpServers" is Claude Desktop's (and most clients'), "servers" VS Code's.
    mcpServers: dict[str, msgspec.Raw] | None = None
    servers: dict[str, msgspec.Raw] | None = None


class _Switch(msgspec.Struct):
    """The one key read from every entry before anything else: whether it is turned off."""

    disabled: bool = False


def unknown_server_error(name: str, known: Iterable[str], *, source: str | None = None, disabled: Iterable[str] = ()) -> ServerConfigError:
    """The error for a server name that is not configured, with the likeliest intended one;
    for one the file turns off, that it is off."""
    if name in disabled:
        return ServerConfigError(
            f'MCP server {name!r} is disabled in {source or "the server file"} ("disabled": true): it is never started, so nothing that calls it runs',
            hint=f'remove "disabled": true from {name!r} in the server file to use it, or call another server',
            server=name,
        )
    known = sorted(known)
    where = f" in {source}" if source else ""
    listed = ", ".join(known) if known else "(none)"
    message = f"unknown MCP server {name!r}{where}; configured servers: {listed}"
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"add {name!r} under \"mcpServers\" in the server file"
    return ServerConfigError(message, hint=hint)


# -- defaults ---------------------------------------------------------------


def _home(environ: Mapping[str, str]) -> str:
    return environ.get("HOME") or os.path.expanduser("~")


def _xdg_dir(environ: Mapping[str, str], var: str, fallback: tuple[str, ...]) -> str:
    # The XDG spec says a relative value is invalid and must be ignored.
    value = environ.get(var, "")
    if value and os.path.isabs(value):
        return value
    return os.path.join(_home(environ), *fallback)


def user_config_path(environ: Mapping[str, str] | None = None) -> str:
    """``$XDG_CONFIG_HOME/vodou/mcp.json``, else ``~/.config/vodou/mcp.json`` (macOS included)."""
    environ = os.environ if environ is None else environ
    return os.path.join(_xdg_dir(environ, "XDG_CONFIG_HOME", (".config",)), "vodou", PROJECT_FILE)


def default_demo_db(environ: Mapping[str, str] | None = None) -> str:
    """Where the demo servers keep their shared state unless ``VODOU_DEMO_DB`` says otherwise."""
    environ = os.environ if environ is None else environ
    explicit = environ.get("VODOU_DEMO_DB")
    if explicit:
        return explicit
    return os.path.join(_xdg_dir(environ, "XDG_DATA_HOME", (".local", "share")), "vodou", "demo.db")


def demo_servers(db_path: str | os.PathLike[str]) -> dict[str, ServerConfig]:
    """The bundled demo servers, run with this interpreter so they work inside any virtualenv."""
    db = os.fspath(db_path)
    python = sys.executable
    servers = {
        "google-calendar": ServerConfig(
            command=python, args=["-m", "vodou_engine.demo.calendar_server"], env={"VODOU_DEMO_DB": db}
        ),
        "gmail": ServerConfig(command=python, args=["-m", "vodou_engine.demo.mail_server"], env={"VODOU_DEMO_DB": db}),
        "slack": ServerConfig(command=python, args=["-m", "vodou_engine.demo.chat_server"], env={"VODOU_DEMO_DB": db}),
    }
    for name in ("board", "recall", "proc"):
        servers[name] = ServerConfig(
            command=python,
            args=["-m", "vodou_engine.demo.lab_server"],
            env={"VODOU_DEMO_DB": db, "VODOU_DEMO_NAME": name},
        )
    return servers


def servers_needed(plan: Plan, done: Callable[[str], bool] = lambda _: False) -> list[str]:
    """The servers a plan's tool steps (and their previews and checks) call, skipping the ``done`` ones."""
    from .plan import ToolNode
    from .policy import BUILTIN_SERVER

    names = []
    for n in plan.nodes:
        if isinstance(n, ToolNode) and not done(n.id):
            for srv in (n.server, n.preview and n.preview.server, n.check and n.check.server):
                if srv and srv != BUILTIN_SERVER:
                    names.append(srv)
    return list(dict.fromkeys(names))


def servers_to_finish(plan: Plan, nodes: Mapping[str, Any]) -> list[str]:
    """The servers a stored run still needs: ``nodes`` are its stored node records by id.
    A step dropped by a quorum, like one that succeeded, will not run again."""
    from .store.records import TERMINAL_NODE_STATES

    done = {nid for nid, n in nodes.items() if n.state in TERMINAL_NODE_STATES}
    return servers_needed(plan, done.__contains__)


# -- parsing ----------------------------------------------------------------

_BYTE_POS = re.compile(r"\s*\(byte (\d+)\)$")


def _line_col(data: bytes, pos: int) -> tuple[int, int]:
    """1-based line and column (in characters, not bytes) of byte offset ``pos``."""
    pos = max(0, min(pos, len(data)))
    start = data.rfind(b"\n", 0, pos) + 1
    line = data.count(b"\n", 0, pos) + 1
    column = len(data[start:pos].decode("utf-8", "replace")) + 1
    return line, column


def _syntax_error(path: str, data: bytes, exc: msgspec.DecodeError) -> ServerConfigError:
    reason = str(exc)
    match = _BYTE_POS.search(reason)
    if match:
        pos = int(match.group(1))
        reason = reason[: match.start()]
        if reason.endswith("trailing characters"):
            pos -= 1  # msgspec reports the byte after the first stray character
    else:
        # "Input data was truncated" carries no position: the problem is at the end.
        pos = len(data.rstrip())
    reason = reason.removeprefix("JSON is malformed: ")
    line, column = _line_col(data, pos)
    text_lines = data.decode("utf-8", "replace").splitlines()
    message = f"{path}:{line}:{column}: invalid JSON: {reason}"
    if 0 < line <= len(text_lines):
        source = text_lines[line - 1].expandtabs(1)
        message += f"\n  {source}\n  {' ' * (column - 1)}^"
    return ServerConfigError(message, hint="the server file must be JSON (no comments, no trailing commas)")


_SHAPE_HINT = (
    'each server needs "command" (a string; "args" a list of strings, "env" an object of strings) '
    'or "url" (an http:// or https:// URL; "headers" an object of strings)'
)
_TIMEOUT_HINT = '"startTimeout" and "callTimeout" are numbers of seconds, e.g. "callTimeout": 300'
_DISABLED_HINT = '"disabled" is true (the server is never started) or false, without quotes'
_SIZE_HINT = '"maxMessageBytes" is a whole number of bytes, e.g. "maxMessageBytes": 67108864 for 64 MiB'


def parse_servers(data: bytes | str, path: str) -> dict[str, ServerConfig]:
    """Decode a server file's bytes; ``path`` is used in messages and to anchor relative ``cwd`` values.
    The servers the file turns off are left out (:func:`parse_server_file` names them)."""
    return parse_server_file(data, path)[0]


def parse_server_file(data: bytes | str, path: str) -> tuple[dict[str, ServerConfig], list[str]]:
    """The servers a file's bytes configure, and the names of those it turns off
    (``"disabled": true``), which are not checked further: they are never started."""
    if isinstance(data, str):
        data = data.encode()
    # Editors on Windows like to prepend a BOM; it is not an error a person can see.
    data = data.removeprefix(b"\xef\xbb\xbf")
    shape_hint = 'expected {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}} (or VS Code\'s {"servers": {...}})'
    if not data.strip():
        raise ServerConfigError(f"{path}: the file is empty", hint=shape_hint)
    from .limits import TooDeep, check_json_depth

    try:
        check_json_depth(data)
    except TooDeep as exc:
        raise ServerConfigError(f"{path}: not a server file: {exc}", hint=shape_hint) from None
    try:
        top = msgspec.json.decode(data, type=_File)
    except msgspec.ValidationError as exc:
        raise ServerConfigError(f"{path}: {exc}", hint=shape_hint) from None
    except msgspec.DecodeError as exc:
        raise _syntax_error(path, data, exc) from None
    if top.mcpServers is not None and top.servers is not None:
        raise ServerConfigError(
            f'{path}: has both "mcpServers" and "servers"; which servers are meant?',
            hint='keep one of them: the engine uses one list of servers, never a merge of two',
        )
    entries = top.mcpServers if top.mcpServers is not None else top.servers
    if entries is None:
        raise ServerConfigError(f'{path}: no "mcpServers" (or "servers") object', hint=shape_hint)

    base = os.path.dirname(os.path.abspath(path)) if path != EMBEDDED_SOURCE else None
    servers: dict[str, ServerConfig] = {}
    disabled: list[str] = []
    for name, raw in entries.items():
        try:
            if msgspec.json.decode(raw, type=_Switch).disabled:
                disabled.append(name)
                continue
            config = msgspec.json.decode(raw, type=ServerConfig)
        except msgspec.ValidationError as exc:
            detail = str(exc).replace("`$.", "`").replace(" - at `$`", "")
            timing = "`startTimeout`" in detail or "`callTimeout`" in detail
            sizing = "`maxMessageBytes`" in detail
            raise ServerConfigError(
                f"{path}: server {name!r}: {detail}",
                hint=_TIMEOUT_HINT if timing else _SIZE_HINT if sizing else _DISABLED_HINT if "`disabled`" in detail else _SHAPE_HINT,
            ) from None
        _settle_transport(config, name, path)
        for key, value in (("startTimeout", config.start_timeout), ("callTimeout", config.call_timeout)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ServerConfigError(
                    f"{path}: server {name!r}: \"{key}\" must be a number of seconds greater than 0, not {value:g}",
                    hint=_TIMEOUT_HINT,
                )
        if config.max_message_bytes is not None and config.max_message_bytes <= 0:
            raise ServerConfigError(
                f"{path}: server {name!r}: \"maxMessageBytes\" must be a number of bytes greater than 0, not {config.max_message_bytes}",
                hint=_SIZE_HINT,
            )
        _check_templates(config, name, path)
        if config.cwd is not None and base is not None and not os.path.isabs(config.cwd):
            # Relative to the file, so a project's mcp.json works wherever it is run from.
            config.cwd = os.path.normpath(os.path.join(base, config.cwd))
        servers[name] = config
    return servers, disabled


_STDIO_ONLY = ("args", "env", "cwd", "inherit")


def _settle_transport(config: ServerConfig, name: str, path: str) -> None:
    """Decide stdio or HTTP from "type", "command" and "url", check the entry has what
    that transport needs and nothing only the other one takes, and clear "type"."""
    where = f"{path}: server {name!r}"
    if config.type is not None:
        transport = _TYPES.get(config.type.strip().lower())
        if transport is None:
            err = _type_error(name, config.type)
            raise ServerConfigError(f"{path}: {err.message}", hint=err.hint)
    elif config.url is not None and config.command is not None:
        raise ServerConfigError(
            f"{where}: has both \"command\" and \"url\"; which one is meant?",
            hint='add "type": "stdio" to start the command, or "type": "http" to use the URL',
        )
    else:
        transport = HTTP if config.url is not None else STDIO
    if transport == HTTP:
        if config.url is None or not config.url.strip():
            raise ServerConfigError(f"{where}: an HTTP server needs \"url\"", hint=_SHAPE_HINT)
        if config.type is None or config.command is None:
            # With "type": "http" a "command" is another client's business; without it, these are ours.
            for key in _STDIO_ONLY:
                if getattr(config, key):
                    raise ServerConfigError(
                        f"{where}: \"{key}\" is for a server started here (\"command\"); an HTTP server takes \"url\" and \"headers\"",
                        hint="secrets for an HTTP server go in \"headers\", e.g. \"Authorization\": \"Bearer ${API_TOKEN}\"",
                    )
        config.command, config.args, config.env, config.cwd, config.inherit = None, [], {}, None, []
    else:
        if config.command is None:
            raise ServerConfigError(f"{where}: no \"command\" (or \"url\" for an HTTP server)", hint=_SHAPE_HINT)
        if not config.command.strip():
            raise ServerConfigError(f"{where}: \"command\" is empty")
        if config.headers and (config.type is None or config.url is None):
            raise ServerConfigError(
                f"{where}: \"headers\" are for an HTTP server (\"url\"); a server started here takes \"env\"",
                hint=_SHAPE_HINT,
            )
        config.url, config.headers = None, {}
    config.type = None


def _check_templates(config: ServerConfig, name: str, path: str) -> None:
    """Every ${...} is well formed (whether each variable is set is checked when the server starts)."""
    fields: list[tuple[str, str]] = []
    if config.command is not None:
        fields.append(('"command"', config.command))
    fields += [(f"args[{i}]", a) for i, a in enumerate(config.args)]
    fields += [(f"env {k}", v) for k, v in config.env.items()]
    if config.url is not None:
        fields.append(('"url"', config.url))
    fields += [(f"header {k}", v) for k, v in config.headers.items()]
    for where, text in fields:
        try:
            parse_template(text)
        except ValueError as exc:
            raise ServerConfigError(f"{path}: server {name!r}: {where}: {exc}", hint=_TEMPLATE_HINT) from None
    if config.cwd is not None and "${" in config.cwd:
        raise ServerConfigError(
            f'{path}: server {name!r}: "cwd" does not take ${{VAR}}', hint="give the directory itself, absolute or relative to this file"
        )
    for var in config.inherit:
        if not _VAR_NAME.match(var):
            raise ServerConfigError(f'{path}: server {name!r}: "inherit" lists {var!r}, which is not a variable name')


def _read(path: str, *, named_by: str | None) -> ServerSet:
    from .limits import NotAFile, TooLarge, read_regular_file

    try:
        data = read_regular_file(path)
    except (NotAFile, TooLarge) as exc:
        raise ServerConfigError(f"cannot read server file {path}: {exc.strerror}", hint="name a JSON file") from None
    except FileNotFoundError:
        if named_by is None:
            raise
        raise ServerConfigError(
            f"server file {path} (named by {named_by}) does not exist",
            hint=f"fix the path, or unset {ENV_VAR} / drop --servers to use the usual discovery",
        ) from None
    except IsADirectoryError:
        raise ServerConfigError(f"server file {path} is a directory, not a JSON file") from None
    except OSError as exc:
        raise ServerConfigError(f"cannot read server file {path}: {exc.strerror or exc}") from None
    servers, disabled = parse_server_file(data, path)
    return ServerSet(servers, path, disabled)


def load_servers(
    explicit: str | os.PathLike[str] | None = None,
    *,
    cwd: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerSet:
    """Find the server file in effect and parse it.

    Order, first hit wins: ``explicit`` (``--servers FILE``), ``$VODOU_SERVERS``,
    ``./mcp.json``, the user config file, the embedded demo servers. The first
    file found is used whole; files are never merged, so what runs is always
    exactly what one file says. A file named explicitly (flag or variable) must
    exist; the implicit locations are skipped when absent.
    """
    environ = os.environ if environ is None else environ
    cwd = os.fspath(cwd) if cwd is not None else os.getcwd()

    def resolve(p: str | os.PathLike[str]) -> str:
        return os.path.join(cwd, os.path.expanduser(os.fspath(p)))

    if explicit is not None and os.fspath(explicit) != "":
        return _read(resolve(explicit), named_by="--servers")

    from_env = environ.get(ENV_VAR, "")
    if from_env:
        return _read(resolve(from_env), named_by=f"${ENV_VAR}")

    for path in (os.path.join(cwd, PROJECT_FILE), user_config_path(environ)):
        try:
            return _read(path, named_by=None)
        except FileNotFoundError:
            continue

    return ServerSet(demo_servers(default_demo_db(environ)), EMBEDDED_SOURCE)
