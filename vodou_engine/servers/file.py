"""The server file: its bytes read, checked, and turned into one :class:`ServerConfig` per server.

Claude Desktop's ``{"mcpServers": {...}}`` and VS Code's ``{"servers": {...}}``
are read alike. Every mistake is a ServerConfigError that names the file, the
server and what to write instead; a JSON syntax error points at its line and
column with a caret. Keys this engine does not use are ignored (the file is
shared with other programs), an entry with ``"disabled": true`` is set aside
unchecked, and each entry is settled to one transport: stdio (``"command"``)
or streamable HTTP (``"url"``). Where the file is found is ``servers/discovery.py``'s.
"""

from __future__ import annotations

import math
import os
import re

import msgspec

from vodou_engine.errors import ServerConfigError
from vodou_engine.limits import TooDeep, check_json_depth
from vodou_engine.servers.config import HTTP, SHAPE_HINT, STDIO, TRANSPORTS, ServerConfig, type_error
from vodou_engine.servers.templates import TEMPLATE_HINT, VAR_NAME, parse_template

__all__ = ["EMBEDDED_SOURCE", "parse_server_file", "parse_servers"]

EMBEDDED_SOURCE = "embedded defaults"
"""The source of the servers no file configures (the embedded demo servers): no file anchors a relative ``cwd``."""


class _File(msgspec.Struct):
    # Servers are decoded one by one afterwards so an error can name the server.
    # "mcpServers" is Claude Desktop's (and most clients'), "servers" VS Code's.
    mcp_servers: dict[str, msgspec.Raw] | None = msgspec.field(default=None, name="mcpServers")
    servers: dict[str, msgspec.Raw] | None = None


class _Switch(msgspec.Struct):
    """The one key read from every entry before anything else: whether it is turned off."""

    disabled: bool = False


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
    if top.mcp_servers is not None and top.servers is not None:
        raise ServerConfigError(
            f'{path}: has both "mcpServers" and "servers"; which servers are meant?',
            hint="keep one of them: the engine uses one list of servers, never a merge of two",
        )
    entries = top.mcp_servers if top.mcp_servers is not None else top.servers
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
                hint=_TIMEOUT_HINT
                if timing
                else _SIZE_HINT
                if sizing
                else _DISABLED_HINT
                if "`disabled`" in detail
                else SHAPE_HINT,
            ) from None
        _settle_transport(config, name, path)
        for key, value in (("startTimeout", config.start_timeout), ("callTimeout", config.call_timeout)):
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ServerConfigError(
                    f'{path}: server {name!r}: "{key}" must be a number of seconds greater than 0, not {value:g}',
                    hint=_TIMEOUT_HINT,
                )
        if config.max_message_bytes is not None and config.max_message_bytes <= 0:
            raise ServerConfigError(
                f'{path}: server {name!r}: "maxMessageBytes" must be a number of bytes greater than 0, not {config.max_message_bytes}',
                hint=_SIZE_HINT,
            )
        _check_auth(config, name, path)
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
        transport = TRANSPORTS.get(config.type.strip().lower())
        if transport is None:
            err = type_error(name, config.type)
            raise ServerConfigError(f"{path}: {err.message}", hint=err.hint)
    elif config.url is not None and config.command is not None:
        raise ServerConfigError(
            f'{where}: has both "command" and "url"; which one is meant?',
            hint='add "type": "stdio" to start the command, or "type": "http" to use the URL',
        )
    else:
        transport = HTTP if config.url is not None else STDIO
    if transport == HTTP:
        if config.url is None or not config.url.strip():
            raise ServerConfigError(f'{where}: an HTTP server needs "url"', hint=SHAPE_HINT)
        if config.type is None or config.command is None:
            # With "type": "http" a "command" is another client's business; without it, these are ours.
            for key in _STDIO_ONLY:
                if getattr(config, key):
                    raise ServerConfigError(
                        f'{where}: "{key}" is for a server started here ("command"); an HTTP server takes "url" and "headers"',
                        hint='secrets for an HTTP server go in "headers", e.g. "Authorization": "Bearer ${API_TOKEN}"',
                    )
        config.command, config.args, config.env, config.cwd, config.inherit = None, [], {}, None, []
    else:
        if config.command is None:
            raise ServerConfigError(f'{where}: no "command" (or "url" for an HTTP server)', hint=SHAPE_HINT)
        if not config.command.strip():
            raise ServerConfigError(f'{where}: "command" is empty')
        if config.headers and (config.type is None or config.url is None):
            raise ServerConfigError(
                f'{where}: "headers" are for an HTTP server ("url"); a server started here takes "env"',
                hint=SHAPE_HINT,
            )
        config.url, config.headers = None, {}
    config.type = None


_AUTH_HINT = '"auth": "oauth" on a server with a "url" (optionally "scopes": ["read", ...]); sign in once with `recipe servers login NAME`'


def _check_auth(config: ServerConfig, name: str, path: str) -> None:
    """``auth`` is ``"oauth"`` (on an HTTP server) or absent; ``scopes`` only goes with it; and an
    OAuth server takes no ``Authorization`` header of its own (which credential would be meant?)."""
    where = f"{path}: server {name!r}"
    if config.auth is None:
        if config.scopes:
            raise ServerConfigError(f'{where}: "scopes" are for an OAuth server ("auth": "oauth")', hint=_AUTH_HINT)
        return
    if not config.oauth:
        raise ServerConfigError(f'{where}: unknown "auth" {config.auth!r}', hint=_AUTH_HINT)
    if config.url is None:
        raise ServerConfigError(f'{where}: "auth": "oauth" is for a server reached by "url"', hint=_AUTH_HINT)
    if any(key.lower() == "authorization" for key in config.headers):
        raise ServerConfigError(
            f'{where}: has both "auth": "oauth" and an "Authorization" header; which credential is meant?',
            hint='keep "auth": "oauth" (the engine sends the signed-in token) or the header, not both',
        )
    for scope in config.scopes:
        if not scope or any(c.isspace() for c in scope):
            raise ServerConfigError(f'{where}: "scopes" holds {scope!r}, which is not an OAuth scope', hint=_AUTH_HINT)
    config.auth = "oauth"


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
            raise ServerConfigError(f"{path}: server {name!r}: {where}: {exc}", hint=TEMPLATE_HINT) from None
    if config.cwd is not None and "${" in config.cwd:
        raise ServerConfigError(
            f'{path}: server {name!r}: "cwd" does not take ${{VAR}}',
            hint="give the directory itself, absolute or relative to this file",
        )
    for var in config.inherit:
        if not VAR_NAME.match(var):
            raise ServerConfigError(f'{path}: server {name!r}: "inherit" lists {var!r}, which is not a variable name')
