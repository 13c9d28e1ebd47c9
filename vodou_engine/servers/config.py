"""One server's configuration: as written in the server file, and resolved.

A :class:`ServerConfig` keeps ``${VAR}`` as written: that form is what every
message, card and binding shows. :meth:`ServerConfig.resolve` takes the values
from the environment when the server is started, into a
:class:`ResolvedServer`, which only what starts or reaches the server reads.
"""

from __future__ import annotations

import os
import shlex
import urllib.parse
from collections.abc import Mapping

import msgspec

from vodou_engine.errors import ServerConfigError
from vodou_engine.masking import Mask
from vodou_engine.servers.templates import TEMPLATE_HINT, parse_template

__all__ = ["HTTP", "SHAPE_HINT", "STDIO", "TRANSPORTS", "ResolvedServer", "ServerConfig", "type_error"]

STDIO = "stdio"
HTTP = "http"

TRANSPORTS = {"stdio": STDIO, "http": HTTP, "streamable-http": HTTP, "streamable_http": HTTP, "streamablehttp": HTTP}
"""Accepted values of "type" (case-insensitive), as other clients spell them."""

SHAPE_HINT = (
    'each server needs "command" (a string; "args" a list of strings, "env" an object of strings) '
    'or "url" (an http:// or https:// URL; "headers" an object of strings)'
)


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
    auth: str | None = None
    """``"oauth"``: an HTTP server reached with an OAuth 2.1 grant a person signed in for once
    (``tools/oauth.py``; the grant is kept in the sign-in file, ``servers/signins.py``)."""
    scopes: list[str] = []
    """The OAuth scopes asked for at sign-in (none: what the server's metadata asks for)."""

    @property
    def oauth(self) -> bool:
        """Whether this server is reached with a signed-in OAuth grant."""
        return self.auth is not None and self.auth.strip().lower() == "oauth"

    @property
    def transport(self) -> str:
        """``"stdio"`` or ``"http"`` (an unknown ``type`` is returned as written, lower-cased)."""
        if self.type is not None:
            return TRANSPORTS.get(self.type.strip().lower(), self.type.strip().lower())
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
                raise ServerConfigError(f'server {name!r}: an HTTP server needs "url"', hint=SHAPE_HINT)
        elif transport == STDIO:
            if not (self.command or "").strip():
                raise ServerConfigError(
                    f'server {name!r}: "command" is empty'
                    if self.command is not None
                    else f'server {name!r}: no "command" (or "url")',
                    hint=SHAPE_HINT,
                )
        else:
            raise type_error(name, self.type)

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
                raise ServerConfigError(f"server {name!r}: {where}: {exc}", hint=TEMPLATE_HINT) from None
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
                    f'server {name!r}: "url" must be an http:// or https:// URL ({self.url})', hint=SHAPE_HINT
                )
            headers = {}
            for key, value in self.headers.items():
                headers[key] = expand(value, f"header {key}")
                if "\r" in headers[key] or "\n" in headers[key]:
                    raise ServerConfigError(f"server {name!r}: the value of header {key} contains a line break")
            config = msgspec.structs.replace(
                self, url=url, headers=headers, type=None, command=None, args=[], env={}, cwd=None, inherit=[]
            )
        else:
            command = expand(self.command or "", '"command"', record=True)
            args = [expand(a, f"args[{i}]", record=True) for i, a in enumerate(self.args)]
            env: dict[str, str] = {}
            for var in self.inherit:
                inherited = environ.get(var)
                if inherited is not None and not inherited.startswith("()"):  # never hand on a bash function
                    env[var] = inherited
                    secrets[var] = inherited
            for key, value in self.env.items():
                env[key] = expand(value, f"env {key}")
            config = msgspec.structs.replace(
                self, command=command, args=args, env=env, type=None, url=None, headers={}, inherit=[]
            )
        return ResolvedServer(name, self, config, used, secrets)


class ResolvedServer:
    """A server with its ``${VAR}`` values taken from the environment: what is started.

    ``config`` holds the values themselves (secrets included) and is handed
    only to what starts or reaches the server; everything shown to a person
    uses ``template`` (the configuration as written), and text that may
    carry a value anyway (a server's stderr, an exception's message) goes
    through :meth:`mask` first.
    """

    __slots__ = ("config", "masking", "name", "secrets", "template", "used")

    def __init__(
        self, name: str, template: ServerConfig, config: ServerConfig, used: dict[str, str], secrets: dict[str, str]
    ):
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


def type_error(name: str, value: object) -> ServerConfigError:
    """The error for a "type" that names no transport this engine speaks (the deprecated SSE one, by name)."""
    shown = value if isinstance(value, str) else _json_repr(value)
    if isinstance(value, str) and value.strip().lower() == "sse":
        return ServerConfigError(
            f'server {name!r}: "type": "sse" (the deprecated HTTP+SSE transport) is not supported',
            hint='use the server\'s streamable HTTP endpoint with "type": "http", or start it over stdio with "command"',
        )
    return ServerConfigError(
        f'server {name!r}: unknown "type" {shown!r}',
        hint='"type" is "stdio" (with "command") or "http" / "streamable-http" (with "url")',
    )


def _json_repr(value: object) -> str:
    return msgspec.json.encode(value).decode()
