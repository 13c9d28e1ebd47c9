"""Which MCP servers exist and how to start them.

The file format is the one people already keep for Claude Desktop and
similar clients, so an existing file can be pointed at as is::

    {"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time"]}}}

Keys this engine does not use ("type", "disabled", a top-level
"globalShortcut", ...) are ignored rather than rejected: the same file is
shared with other programs that put their own settings in it. Two keys are
this engine's own, both optional: "startTimeout" and "callTimeout" (seconds).

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
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from vodou_engine.errors import ServerConfigError

if TYPE_CHECKING:
    from vodou_engine.plan import Plan

__all__ = [
    "ENV_VAR",
    "EMBEDDED_SOURCE",
    "ServerConfig",
    "ServerSet",
    "default_demo_db",
    "demo_servers",
    "load_servers",
    "parse_servers",
    "unknown_server_error",
    "user_config_path",
]

ENV_VAR = "VODOU_SERVERS"
"""Environment variable naming a server file; beaten only by ``--servers``."""

EMBEDDED_SOURCE = "embedded defaults"

PROJECT_FILE = "mcp.json"


class ServerConfig(msgspec.Struct, omit_defaults=True):
    """How to start one stdio MCP server.

    ``env`` is laid over the SDK's minimal inherited environment (PATH, HOME,
    ...), not over the whole parent environment, so secrets in the caller's
    shell do not leak into every server by accident.

    ``start_timeout`` and ``call_timeout`` (JSON keys ``startTimeout`` and
    ``callTimeout``, camelCase like the rest of the file's format) are in
    seconds; unset, the hub's defaults apply (``tools.hub.DEFAULT_START_TIMEOUT``,
    ``tools.hub.DEFAULT_CALL_TIMEOUT``). :func:`parse_servers` checks they are
    positive finite numbers; a struct built in code is taken as it is.
    """

    command: str
    args: list[str] = []
    env: dict[str, str] = {}
    cwd: str | None = None
    start_timeout: float | None = msgspec.field(default=None, name="startTimeout")
    """Seconds the server gets to start, answer ``initialize`` and list its tools."""
    call_timeout: float | None = msgspec.field(default=None, name="callTimeout")
    """Seconds one tool call may take before it is given up as unanswered (and cancelled)."""

    def command_line(self) -> str:
        """The command as a person would type it, for error messages."""
        return shlex.join([self.command, *self.args])


class ServerSet(msgspec.Struct):
    """The servers in effect, and where they came from (shown in errors and `--verbose`)."""

    servers: dict[str, ServerConfig]
    source: str

    def get(self, name: str) -> ServerConfig:
        try:
            return self.servers[name]
        except KeyError:
            raise unknown_server_error(name, self.servers, source=self.source) from None


class _File(msgspec.Struct):
    # Servers are decoded one by one afterwards so an error can name the server.
    mcpServers: dict[str, msgspec.Raw]


def unknown_server_error(name: str, known: Iterable[str], *, source: str | None = None) -> ServerConfigError:
    """The error for a server name that is not configured, with the likeliest intended one."""
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


_SHAPE_HINT = 'each server needs "command" (a string); "args" is a list of strings, "env" an object of strings'
_TIMEOUT_HINT = '"startTimeout" and "callTimeout" are numbers of seconds, e.g. "callTimeout": 300'


def parse_servers(data: bytes | str, path: str) -> dict[str, ServerConfig]:
    """Decode a server file's bytes; ``path`` is used in messages and to anchor relative ``cwd`` values."""
    if isinstance(data, str):
        data = data.encode()
    # Editors on Windows like to prepend a BOM; it is not an error a person can see.
    data = data.removeprefix(b"\xef\xbb\xbf")
    shape_hint = 'expected {"mcpServers": {"NAME": {"command": "...", "args": [...], "env": {...}}}}'
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

    base = os.path.dirname(os.path.abspath(path)) if path != EMBEDDED_SOURCE else None
    servers: dict[str, ServerConfig] = {}
    for name, raw in top.mcpServers.items():
        try:
            config = msgspec.json.decode(raw, type=ServerConfig)
        except msgspec.ValidationError as exc:
            detail = str(exc).replace("`$.", "`").replace(" - at `$`", "")
            timing = "`startTimeout`" in detail or "`callTimeout`" in detail
            raise ServerConfigError(
                f"{path}: server {name!r}: {detail}",
                hint=_TIMEOUT_HINT if timing else _SHAPE_HINT,
            ) from None
        if not config.command.strip():
            raise ServerConfigError(f"{path}: server {name!r}: \"command\" is empty")
        for key, value in (("startTimeout", config.start_timeout), ("callTimeout", config.call_timeout)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ServerConfigError(
                    f"{path}: server {name!r}: \"{key}\" must be a number of seconds greater than 0, not {value:g}",
                    hint=_TIMEOUT_HINT,
                )
        if config.cwd is not None and base is not None and not os.path.isabs(config.cwd):
            # Relative to the file, so a project's mcp.json works wherever it is run from.
            config.cwd = os.path.normpath(os.path.join(base, config.cwd))
        servers[name] = config
    return servers


def _read(path: str, *, named_by: str | None) -> dict[str, ServerConfig]:
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
    return parse_servers(data, path)


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
        path = resolve(explicit)
        return ServerSet(_read(path, named_by="--servers"), path)

    from_env = environ.get(ENV_VAR, "")
    if from_env:
        path = resolve(from_env)
        return ServerSet(_read(path, named_by=f"${ENV_VAR}"), path)

    for path in (os.path.join(cwd, PROJECT_FILE), user_config_path(environ)):
        try:
            return ServerSet(_read(path, named_by=None), path)
        except FileNotFoundError:
            continue

    return ServerSet(demo_servers(default_demo_db(environ)), EMBEDDED_SOURCE)
