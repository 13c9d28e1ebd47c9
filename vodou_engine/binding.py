"""Which servers a run is bound to: the resolved configuration it was started, and approved, with.

A card and a fingerprint that only say ``slack·post_message`` leave open
*which* slack: a run parked in a project whose ``mcp.json`` maps ``slack`` to
a sandbox, approved from a directory whose ``mcp.json`` maps it to
production, would post to production. So a run stores, per server, what that
name resolved to when it started (command, arguments, working directory,
the executable the command resolved to, and its environment as names with a
digest of each value, never the values; for a server reached by URL, the
transport, the URL, and its headers as names with a digest of each value),
each approval's fingerprint covers the binding of the server it calls, and
every later process that drives the run checks that the servers it is about
to start resolve the same way.

``${VAR}`` in a configuration: the binding keeps the text as written (the
``${VAR}``, never its value) and a salted digest of each value it took, so a
variable that now holds something else (another token, another URL) is a
different server: refused, like an edited file.

Import cost: msgspec and the standard library only (``recipe approve``
checks bindings before it imports trio or the MCP SDK).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable, Mapping

import msgspec

from .errors import ServerMismatchError
from .servers import EMBEDDED_SOURCE, ENV_VAR, HTTP, PROJECT_FILE, STDIO, ServerConfig, ServerSet, load_servers, template_vars

__all__ = ["ServerBinding", "bind", "bind_all", "decode_bindings", "digest", "differences", "encode_bindings", "servers_for_run", "verify_bindings"]


class ServerBinding(msgspec.Struct, frozen=True, omit_defaults=True):
    """One server as a run resolved it. ``source`` (the file it came from) is shown, not compared.

    Fields hold the configuration as written (``${VAR}`` unexpanded) or digests, never a
    value taken from the environment. New fields go at the end, with defaults left out
    of the encoding, so a binding stored before them keeps its digest."""

    command: str = ""
    args: list[str] = []
    cwd: str | None = None
    executable: str | None = None
    """Where ``command`` resolved on the server's PATH (None: not found, so it cannot start);
    a salted sha256 of that path when the command is built from ``${VAR}``."""
    env: dict[str, str] = {}
    """Variable name -> salted sha256 of its value (``inherit``-ed variables included)."""
    source: str = ""
    transport: str = STDIO
    url: str | None = None
    """An HTTP server's endpoint, as written."""
    headers: dict[str, str] = {}
    """Header name -> salted sha256 of its value."""
    vars: dict[str, str] = {}
    """Each ``${VAR}`` of command, args and url -> salted sha256 of the value it took."""

    def command_line(self) -> str:
        """What a person is shown: the command line, or the URL of an HTTP server."""
        import shlex

        if self.transport == HTTP:
            return self.url or ""
        return shlex.join([self.command, *self.args])


_bindings_decoder = msgspec.json.Decoder(dict[str, ServerBinding])
_encoder = msgspec.json.Encoder(order="deterministic")


def _value_digest(salt: str, name: str, value: str) -> str:
    return "sha256:" + hashlib.sha256(f"{salt}\0{name}\0{value}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _executable(config: ServerConfig) -> str | None:
    """``config`` is a resolved one: its env holds the values the server gets."""
    from .tools.process import default_environment

    path = (default_environment() | dict(config.env)).get("PATH")
    command = config.command or ""
    if os.sep in command and config.cwd and not os.path.isabs(command):
        command = os.path.join(config.cwd, command)
    found = shutil.which(command, path=path)
    # abspath, not realpath: two virtualenvs' `python` links resolve to one interpreter,
    # but run different code.
    return os.path.abspath(found) if found else None


def bind(
    config: ServerConfig, *, source: str, salt: str, name: str = "", environ: Mapping[str, str] | None = None
) -> ServerBinding:
    """``salt`` (the run id) keeps a value's digest from being looked up in a table.

    ``${VAR}`` are resolved from ``environ`` (default: this process's environment)
    as the server would be started: ServerConfigError (exit 2) naming ``name`` and the
    variable if one is not set."""
    resolved = config.resolve(name, environ)
    here = resolved.config
    used = {var: _value_digest(salt, "$" + var, value) for var, value in sorted(resolved.used.items())}
    if config.transport == HTTP:
        return ServerBinding(
            transport=HTTP,
            url=config.url,
            headers={key: _value_digest(salt, key, value) for key, value in sorted(here.headers.items())},
            vars=used,
            source=source,
        )
    executable = _executable(here)
    if executable is not None and template_vars(config.command or ""):
        # A path that came from the environment is kept like any value from there.
        executable = _value_digest(salt, "executable", executable)
    return ServerBinding(
        command=config.command or "",
        args=list(config.args),
        cwd=config.cwd,
        executable=executable,
        env={key: _value_digest(salt, key, value) for key, value in sorted(here.env.items())},
        source=source,
        vars=used,
    )


def bind_all(servers: ServerSet, names: Iterable[str], *, salt: str) -> dict[str, ServerBinding]:
    """Bindings for the configured ones of ``names`` (an unknown name is reported where it is started)."""
    return {n: bind(servers.servers[n], source=servers.source, salt=salt, name=n) for n in names if n in servers.servers}


def digest(binding: ServerBinding | None) -> str:
    """What an approval's fingerprint covers: every field but where the configuration was read."""
    if binding is None:
        return ""
    return "sha256:" + hashlib.sha256(_encoder.encode(msgspec.structs.replace(binding, source=""))).hexdigest()


def encode_bindings(bindings: Mapping[str, ServerBinding]) -> str:
    return _encoder.encode(dict(bindings)).decode()


def decode_bindings(data: str | bytes | None) -> dict[str, ServerBinding]:
    return _bindings_decoder.decode(data) if data else {}


def differences(stored: ServerBinding, here: ServerBinding) -> list[str]:
    """What differs, in words a person can check (never a value of the environment)."""
    out = []
    for field in ("transport", "url", "command", "args", "cwd", "executable"):
        a, b = getattr(stored, field), getattr(here, field)
        if a == b:
            continue
        if field == "executable" and any(isinstance(v, str) and v.startswith("sha256:") for v in (a, b)):
            out.append("executable: the command resolves to another file here")
        else:
            out.append(f"{field}: the run has {a!r}, here it is {b!r}")
    for kind, a, b in (("env", stored.env, here.env), ("header", stored.headers, here.headers)):
        for name in sorted(set(a) | set(b)):
            if name not in b:
                out.append(f"{kind} {name}: set for the run, not set here")
            elif name not in a:
                out.append(f"{kind} {name}: set here, not set for the run")
            elif a[name] != b[name]:
                out.append(f"{kind} {name}: a different value here")
    for name in sorted(set(stored.vars) & set(here.vars)):
        if stored.vars[name] != here.vars[name]:
            out.append(f"${{{name}}}: a different value here")
    return out


def verify_bindings(run_id: str, stored: Mapping[str, ServerBinding], servers: ServerSet, names: Iterable[str]) -> None:
    """Refuse (ServerMismatchError, exit 5) unless every server in ``names`` resolves as the run's binding says."""
    problems: dict[str, list[str]] = {}
    for name in names:
        bound = stored.get(name)
        if bound is None:
            continue  # a run stored before bindings existed, or a server it never used
        config = servers.servers.get(name)
        if config is None:
            problems[name] = [f"not configured in {servers.source}"]
            continue
        diff = differences(bound, bind(config, source=servers.source, salt=run_id, name=name))
        if diff:
            problems[name] = diff
    if problems:
        lines = [f"server {name!r}: " + "; ".join(diff) for name, diff in problems.items()]
        sources = sorted({stored[n].source for n in problems if stored[n].source})
        raise ServerMismatchError(
            f"run {run_id} was started against other servers than the ones configured here "
            f"({servers.source}); nothing was run:\n  " + "\n  ".join(lines),
            hint="use the server file the run was started with"
            + (f" ({', '.join(sources)})" if sources else "")
            + ", or start a new run against these servers",
            run=run_id,
            servers=sorted(problems),
            differences=problems,
            here=servers.source,
            bound=sources,
        )


def servers_for_run(
    run_id: str,
    stored: Mapping[str, ServerBinding],
    names: Iterable[str],
    explicit: str | os.PathLike[str] | ServerSet | None = None,
    *,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerSet:
    """The servers to drive a stored run with, checked against its bindings.

    A configuration chosen on purpose here (``explicit``, ``$VODOU_SERVERS``,
    or a ``./mcp.json``) is used and must agree with the run. Otherwise the
    run's own server file is read again (so a run parked in one project can
    be approved from anywhere), and failing that the usual defaults.
    """
    environ = os.environ if environ is None else environ
    cwd = cwd or os.getcwd()
    names = list(names)
    if isinstance(explicit, ServerSet):
        servers = explicit
    elif explicit or environ.get(ENV_VAR) or os.path.isfile(os.path.join(cwd, PROJECT_FILE)):
        servers = load_servers(explicit, cwd=cwd, environ=environ)
    else:
        recorded = {stored[n].source for n in names if n in stored}
        source = recorded.pop() if len(recorded) == 1 else None
        if source and source != EMBEDDED_SOURCE and os.path.isfile(source):
            servers = load_servers(source, cwd=cwd, environ=environ)
        else:
            servers = load_servers(None, cwd=cwd, environ=environ)
    verify_bindings(run_id, stored, servers, names)
    return servers
