"""Which server file is in effect, and the servers when there is none.

The first of ``--servers FILE``, ``$VODOU_SERVERS``, ``./mcp.json`` and the
user's config file that exists is used whole (never a merge); with none, the
embedded demo servers. :class:`ServerSet` carries the servers with where they
came from, and :func:`unknown_server_error` words a name that is not among
them, or that the file turns off.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Iterable, Mapping

import msgspec

from vodou_engine.errors import ServerConfigError
from vodou_engine.limits import NotAFile, TooLarge, read_regular_file
from vodou_engine.servers.config import ServerConfig
from vodou_engine.servers.file import EMBEDDED_SOURCE, parse_server_file

__all__ = [
    "ENV_VAR",
    "PROJECT_FILE",
    "ServerSet",
    "default_demo_db",
    "demo_servers",
    "load_servers",
    "unknown_server_error",
    "user_config_path",
]

ENV_VAR = "VODOU_SERVERS"
"""Environment variable naming a server file; beaten only by ``--servers``."""

PROJECT_FILE = "mcp.json"


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


def unknown_server_error(
    name: str, known: Iterable[str], *, source: str | None = None, disabled: Iterable[str] = ()
) -> ServerConfigError:
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
    hint = f"did you mean {close[0]!r}?" if close else f'add {name!r} under "mcpServers" in the server file'
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


def _read(path: str, *, named_by: str | None) -> ServerSet:

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
