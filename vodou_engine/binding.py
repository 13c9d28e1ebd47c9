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

What runs is also where it runs from: ``python3 chat.py`` or ``python3 -m
chat`` is another program in another directory. So a stdio server's binding
records the directory it starts in (``workdir``, links followed), the files
its command line reaches from there (``files``: real paths, and code by
content; see ``launch.py``), and the variables every server inherits from
the caller's environment (``inherited``: ``PATH`` decides which programs
it runs, ``HOME`` which configuration and credentials it reads). A stored
run's servers are always started in its recorded directory, whoever drives
it from wherever (:func:`servers_for_run` hands back the configurations to
start, with that directory), and refused when what would start there now
differs.

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
import shlex
from collections.abc import Iterable, Mapping
from typing import Any

import msgspec

from .errors import ServerConfigError, ServerMismatchError
from .launch import Reached, content_id, reached, which
from .servers import (
    EMBEDDED_SOURCE,
    ENV_VAR,
    HTTP,
    PROJECT_FILE,
    STDIO,
    ServerConfig,
    ServerSet,
    load_servers,
    template_vars,
)
from .servers.signins import SignIns, resource_key

__all__ = [
    "BoundFile",
    "Observed",
    "ServerBinding",
    "bind",
    "bind_all",
    "decode_bindings",
    "differences",
    "digest",
    "encode_bindings",
    "observe",
    "observe_all",
    "seal",
    "servers_for_run",
    "started_where",
    "verify_bindings",
]

BOUND_INHERITED = ("HOME", "LOGNAME", "PATH", "SHELL", "USER")
"""The variables every started server inherits from the caller (``tools.process``) that
decide what it runs and as whom; ``TERM`` is left out: a server speaks JSON over pipes,
and a run started at a terminal may be approved from a web inbox that has none."""


class BoundFile(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """A file or directory a server's command line reaches from its start directory.
    (Fields in alphabetical order: encoded like the same dict, whichever was built.)"""

    content: str | None = None
    """For code only (``launch.py``): a salted sha256 of what identifies its content."""
    path: str
    """Its real path (links followed); a salted sha256 of it when the argument holds ``${VAR}``."""


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
    workdir: str | None = None
    """The directory the server starts in, absolute with links followed (None: a binding
    stored before it was recorded, or an HTTP server)."""
    files: dict[str, BoundFile] = {}
    """What the command line reaches from ``workdir``, by where it is named
    (``command``, ``args[0]``, ``-m chat: chat.py``)."""
    inherited: dict[str, str] = {}
    """Each of BOUND_INHERITED the server gets from the caller -> salted sha256 of its value."""
    auth: dict[str, str] = {}
    """For an ``"auth": "oauth"`` server: ``issuer`` (the authorization server, as it names
    itself) and ``grant``, a salted sha256 of the grant's identity (issuer, client id, the
    grant id a sign-in draws and its refreshes keep), or ``none`` when no sign-in is stored.
    Never a token: a refresh changes the tokens, not the grant, so it leaves the binding as
    it was; a new sign-in is another grant (maybe another account), so it does not."""

    def command_line(self) -> str:
        """What a person is shown: the command line, or the URL of an HTTP server."""
        if self.transport == HTTP:
            return self.url or ""
        return shlex.join([self.command, *self.args])


_bindings_decoder = msgspec.json.Decoder(dict[str, ServerBinding])
_encoder = msgspec.json.Encoder(order="deterministic")


def _value_digest(salt: str, name: str, value: str) -> str:
    return "sha256:" + hashlib.sha256(f"{salt}\0{name}\0{value}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _base_environment() -> dict[str, str]:
    from .tools.process import default_environment  # here: subprocess, which `recipe runs` and `show` do without

    return default_environment()


def _executable(config: ServerConfig, start: str, base: Mapping[str, str]) -> tuple[str | None, bool]:
    """``config`` is a resolved one: its env holds the values the server gets. Where the
    command is found when started in ``start``, and whether that depended on ``start``."""
    path = (dict(base) | dict(config.env)).get("PATH")
    return which(config.command or "", path, start)


class Observed(msgspec.Struct, frozen=True, kw_only=True):
    """What :func:`observe` found of one server's configuration here and now: everything a
    binding holds, before any value is digested. Sealed with a salt (:func:`seal`), it gives
    the binding :func:`bind` would have given at that moment: one look at the files serves
    both the warm server's key and the run's record. Holds values of the environment:
    never stored, never shown."""

    config: ServerConfig
    """As written (``${VAR}`` unexpanded)."""
    here: ServerConfig
    """Resolved: what is started."""
    used: dict[str, str]
    """Each ``${VAR}`` that was expanded -> its value."""
    workdir: str | None = None
    base: dict[str, str] = {}
    executable: str | None = None
    reached: list[tuple[Reached, str | None]] = []
    """What the command line reaches, each with its content id (code only)."""
    grant: tuple[str, str] | None = None
    """An OAuth server's stored grant: (issuer, what identifies the grant); None when none is stored."""


def observe(
    config: ServerConfig, *, name: str = "", environ: Mapping[str, str] | None = None, start: str | None = None
) -> Observed:
    """Look at what ``config`` starts now (its ``${VAR}`` from ``environ``, default this
    process's environment; its start directory ``start``, default its ``cwd``, else this
    process's directory): ServerConfigError (exit 2) when a variable is not set. Blocking:
    reads the files its command line reaches (call it off the trio thread)."""
    resolved = config.resolve(name, environ)
    here = resolved.config
    used = dict(resolved.used)
    if config.transport == HTTP:
        grant = None
        if config.oauth:
            assert here.url is not None
            stored = SignIns().get(resource_key(here.url))
            if stored is not None:
                grant = (stored.issuer, f"{stored.issuer}\0{stored.client_id}\0{stored.grant_id}")
        return Observed(config=config, here=here, used=used, grant=grant)
    workdir = os.path.realpath(start or config.cwd or os.getcwd())
    base = _base_environment()
    executable, _ = _executable(here, workdir, base)
    items = reached(executable, list(here.args), workdir, base | dict(here.env))
    return Observed(
        config=config,
        here=here,
        used=used,
        workdir=workdir,
        base=base,
        executable=executable,
        reached=[(item, content_id(item.path) if item.code else None) for item in items],
    )


def seal(seen: Observed, *, source: str, salt: str) -> ServerBinding:
    """The binding of what :func:`observe` found, its values digested with ``salt``."""
    config, here = seen.config, seen.here
    used = {var: _value_digest(salt, "$" + var, value) for var, value in sorted(seen.used.items())}
    if config.transport == HTTP:
        auth: dict[str, str] = {}
        if config.oauth:  # see ``ServerBinding.auth``
            if seen.grant is None:
                auth = {"grant": "none"}
            else:
                issuer, identity = seen.grant
                auth = {"issuer": issuer, "grant": _value_digest(salt, "oauth grant", identity)}
        return ServerBinding(
            transport=HTTP,
            url=config.url,
            headers={key: _value_digest(salt, key, value) for key, value in sorted(here.headers.items())},
            vars=used,
            source=source,
            auth=auth,
        )
    executable = seen.executable
    files = _files(config, seen.reached, salt)
    if executable is not None and template_vars(config.command or ""):
        # A path that came from the environment is kept like any value from there.
        executable = _value_digest(salt, "executable", executable)
    base = seen.base
    return ServerBinding(
        command=config.command or "",
        args=list(config.args),
        cwd=config.cwd,
        executable=executable,
        env={key: _value_digest(salt, key, value) for key, value in sorted(here.env.items())},
        source=source,
        vars=used,
        workdir=seen.workdir,
        files=files,
        inherited={
            key: _value_digest(salt, key, base[key]) for key in BOUND_INHERITED if key in base and key not in here.env
        },
    )


def bind(
    config: ServerConfig,
    *,
    source: str,
    salt: str,
    name: str = "",
    environ: Mapping[str, str] | None = None,
    start: str | None = None,
) -> ServerBinding:
    """``salt`` (the run id) keeps a value's digest from being looked up in a table.

    ``${VAR}`` are resolved from ``environ`` (default: this process's environment)
    as the server would be started: ServerConfigError (exit 2) naming ``name`` and the
    variable if one is not set. ``start``: the directory the server starts in
    (default: its ``cwd``, else this process's working directory)."""
    return seal(observe(config, name=name, environ=environ, start=start), source=source, salt=salt)


def _files(written: ServerConfig, found: list[tuple[Reached, str | None]], salt: str) -> dict[str, BoundFile]:
    """What the command line reaches from ``workdir``; a path named through ``${VAR}`` is
    kept as a digest, like any value from the environment."""
    files = {}
    for item, content in found:
        written_as = (written.command or "") if item.arg is None else written.args[item.arg]
        label, path = item.label, item.path
        if item.var is not None:
            # named by an environment value (PYTHONPATH, LD_PRELOAD), kept like any such value
            path = _value_digest(salt, "path", path)
            label = f"through {item.var}: " + _value_digest(salt, "label", label)
        elif template_vars(written_as):
            path = _value_digest(salt, "path", path)
            if label.startswith("-m "):  # the module's name came from the environment too
                label = f"-m args[{item.arg}]: " + _value_digest(salt, "module", label)
            elif label not in ("command", f"args[{item.arg}]"):  # the label holds the word as it was expanded
                label = f"args[{item.arg}]: " + _value_digest(salt, "word", label)
        files[label] = BoundFile(
            path=path, content=None if content is None else _value_digest(salt, "content", content)
        )
    return files


def depends_on_directory(config: ServerConfig, *, name: str = "", start: str | None = None) -> list[str]:
    """What of ``config``'s command line is found from the directory it starts in (a
    relative path, a relative ``PATH`` entry, a ``-m`` module there): a binding stored
    before start directories were recorded can be trusted only when this is empty."""
    here = config.resolve(name).config
    workdir = os.path.realpath(start or config.cwd or os.getcwd())
    executable, relative = _executable(here, workdir, _base_environment())
    out = [f"command {config.command!r}"] if relative else []
    for item in reached(executable, list(here.args), workdir, _base_environment() | dict(here.env)):
        if item.relative and item.var is not None:
            out.append(f"a file named through ${item.var}")  # never the value
        elif item.relative and item.arg is not None and item.label == f"args[{item.arg}]":
            out.append(f"{item.label} {config.args[item.arg]!r}")  # an argument: shown as given
        elif item.relative:
            out.append(item.label)
    return out


def observe_all(servers: ServerSet, names: Iterable[str]) -> dict[str, Observed]:
    """:func:`observe` for the configured ones of ``names``; one whose ``${VAR}`` is not set
    is left out (starting it reports that). Blocking: call it off the trio thread."""
    out = {}
    for n in names:
        config = servers.servers.get(n)
        if config is None:
            continue
        try:
            out[n] = observe(config, name=n)
        except ServerConfigError:
            continue
    return out


def bind_all(
    servers: ServerSet, names: Iterable[str], *, salt: str, seen: Mapping[str, Observed] | None = None
) -> dict[str, ServerBinding]:
    """Bindings for the configured ones of ``names`` (an unknown name is reported where it is
    started). ``seen``: what :func:`observe` found of some of them just before (for the warm
    server a run is given), sealed as it is when it observed the same configuration."""
    seen = seen or {}
    out = {}
    for n in names:
        config = servers.servers.get(n)
        if config is None:
            continue
        found = seen.get(n)
        if found is None or found.config != config:
            out[n] = bind(config, source=servers.source, salt=salt, name=n)
        else:
            out[n] = seal(found, source=servers.source, salt=salt)
    return out


def digest(binding: ServerBinding | None) -> str:
    """What an approval's fingerprint covers: every field but where the configuration was read."""
    if binding is None:
        return ""
    return "sha256:" + hashlib.sha256(_encoder.encode(msgspec.structs.replace(binding, source=""))).hexdigest()


def encode_bindings(bindings: Mapping[str, ServerBinding]) -> str:
    return _encoder.encode(dict(bindings)).decode()


def decode_bindings(data: str | bytes | None) -> dict[str, ServerBinding]:
    return _bindings_decoder.decode(data) if data else {}


_CONFIGURED = ("transport:", "url:", "command:", "args:", "cwd:", "env ", "header ", "${")
"""How the differences in what the server file says (or its ``${VAR}`` take) begin; the rest
(executable, inherited variables, directory, files) are in what the same text reaches here."""


def differences(stored: ServerBinding, here: ServerBinding) -> list[str]:
    """What differs, in words a person can check (never a value of the environment).

    The start directory, the files and the inherited variables are compared only when
    the run recorded them (a binding stored before them has no ``workdir``)."""
    out = []
    for field in ("transport", "url", "command", "args", "cwd", "executable"):
        a, b = getattr(stored, field), getattr(here, field)
        if a == b:
            continue
        if field == "executable" and any(isinstance(v, str) and v.startswith("sha256:") for v in (a, b)):
            out.append("executable: the command resolves to another file here")
        else:
            out.append(f"{field}: the run has {a!r}, here it is {b!r}")
    for kind, a, b in (("env", stored.env, here.env), ("header", stored.headers, here.headers)) + (
        (("inherited", stored.inherited, here.inherited),) if stored.workdir is not None else ()
    ):
        for name in sorted(set(a) | set(b)):
            if name not in b:
                out.append(f"{kind} {name}: set for the run, not set here")
            elif name not in a:
                out.append(f"{kind} {name}: set here, not set for the run")
            elif a[name] != b[name]:
                out.append(f"{kind} {name}: a different value here")
    out.extend(_auth_differences(stored.auth, here.auth))
    for name in sorted(set(stored.vars) & set(here.vars)):
        if stored.vars[name] != here.vars[name]:
            out.append(f"${{{name}}}: a different value here")
    if stored.workdir is not None:
        if stored.workdir != here.workdir:
            out.append(f"directory: the run's servers start in {stored.workdir!r}, here it is {here.workdir!r}")
        out.extend(_file_differences(stored, here))
    return out


def _auth_differences(stored: Mapping[str, str], here: Mapping[str, str]) -> list[str]:
    """How the OAuth grant differs, in words (never a token: there is none here)."""
    if stored == here:
        return []
    if not stored:
        return ["oauth: the run reached the server without a sign-in, here it needs one"]
    if not here:
        return ["oauth: the run reached the server with a sign-in, here it takes none"]
    if here.get("grant") == "none":
        return ["oauth: no sign-in is stored here for this server (the run's was removed); a new one is another grant"]
    if stored.get("issuer") != here.get("issuer"):
        return [f"oauth: the run was signed in with {stored.get('issuer')!r}, here with {here.get('issuer')!r}"]
    return ["oauth: signed in again since the run started (another grant, maybe another account)"]


def _file_differences(stored: ServerBinding, here: ServerBinding) -> list[str]:
    out = []
    for label in sorted(set(stored.files) | set(here.files), key=_label_order):
        a, b = stored.files.get(label), here.files.get(label)
        if label == "command" and stored.executable != here.executable:
            continue  # said already: the command resolves elsewhere
        shown = _shown(label, stored)
        if b is None:
            out.append(f"{shown}: reached {_path(a)} when the run started, nothing here")
        elif a is None:
            out.append(f"{shown}: reaches {_path(b)} here, nothing when the run started")
        elif a.path != b.path:
            if a.path.startswith("sha256:") or b.path.startswith("sha256:"):
                out.append(f"{shown}: resolves to another file here")
            else:
                out.append(f"{shown}: the run had {a.path}, here it is {b.path}")
        elif a.content != b.content:
            out.append(f"{shown}: {_path(b)} changed since the run started")
    return out


def _label_order(label: str) -> tuple[int, int, str]:
    if label == "command":
        return (0, 0, label)
    if label.startswith("args["):
        return (1, int(label[5 : label.index("]")]), label)
    return (2, 0, label)


def _shown(label: str, binding: ServerBinding) -> str:
    """``args[0] 'chat.py'``: where a file is named, with the text as written."""
    if label == "command":
        return f"command {binding.command!r}"
    if label.startswith("args[") and label.endswith("]"):
        i = int(label[5:-1])
        if i < len(binding.args):
            return f"{label} {binding.args[i]!r}"
    return label


def _path(f: BoundFile | None) -> str:
    if f is None:
        return "nothing"
    return "a file named through the environment" if f.path.startswith("sha256:") else f.path


def verify_bindings(
    run_id: str, stored: Mapping[str, ServerBinding], servers: ServerSet, names: Iterable[str]
) -> ServerSet:
    """Refuse (ServerMismatchError, exit 5) unless every server in ``names`` resolves as the
    run's binding says. Returns the servers to start: those of ``servers``, each one the run
    recorded a start directory for set to start there (whatever this process's directory)."""
    problems: dict[str, list[str]] = {}
    configured = False  # a difference in what the server file says (else only in what it reaches here)
    configs = dict(servers.servers)
    for name in names:
        bound = stored.get(name)
        if bound is None:
            continue  # a run stored before bindings existed, or a server it never used
        config = servers.servers.get(name)
        if config is None:
            problems[name] = [f"not configured in {servers.source}"]
            configured = True
            continue
        if bound.workdir is None:
            diff = differences(bound, bind(config, source=servers.source, salt=run_id, name=name))
            if config.transport != HTTP and config.cwd is None:
                diff += [
                    f"{what} is found from the directory the server starts in, which the run did not record"
                    for what in depends_on_directory(config, name=name)
                ]
        elif not os.path.isdir(bound.workdir):
            diff = [f"directory {bound.workdir!r}, where the run's server starts, no longer exists"]
        else:
            diff = differences(bound, bind(config, source=servers.source, salt=run_id, name=name, start=bound.workdir))
            configs[name] = msgspec.structs.replace(config, cwd=bound.workdir)
        if diff:
            problems[name] = diff
            configured = configured or any(d.startswith(_CONFIGURED) for d in diff)
    if problems:
        lines = [f"server {name!r}: " + "; ".join(diff) for name, diff in problems.items()]
        sources = sorted({stored[n].source for n in problems if stored[n].source})
        raise ServerMismatchError(
            f"run {run_id} was started against other servers than the ones configured here "
            f"({servers.source}); nothing was run:\n  " + "\n  ".join(lines),
            hint=(
                "the sign-in the run was started (and approved) under is gone or was replaced: start a new run, "
                "which uses the sign-in stored now"
                if all(d.startswith("oauth:") for diff in problems.values() for d in diff)
                else "use the server file the run was started with"
                + (f" ({', '.join(sources)})" if sources else "")
                + ", or start a new run against these servers"
                if configured
                else "the server file says the same, but what it starts differs here: put back the files, directory and environment the run started with (named above), or start a new run"
            ),
            run=run_id,
            servers=sorted(problems),
            differences=problems,
            here=servers.source,
            bound=sources,
            configured=configured,
        )
    return ServerSet(configs, servers.source)


def servers_for_run(
    run_id: str,
    stored: Mapping[str, ServerBinding],
    names: Iterable[str],
    explicit: str | os.PathLike[str] | ServerSet | None = None,
    *,
    cwd: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServerSet:
    """The servers to drive a stored run with, checked against its bindings, each set to
    start in the directory the run recorded for it.

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
    return verify_bindings(run_id, stored, servers, names)


def started_where(run_id: str, servers: ServerSet, hub: Any) -> None:
    """Refuse (ServerMismatchError) a hub of warm servers, handed in by a long-lived process,
    whose server was started in another directory than the one ``servers`` (checked by
    :func:`verify_bindings`) says it starts in. A server the hub does not hold is the
    drive's to report. Blocking (it resolves paths): call it off the trio thread."""
    problems = {}
    for name, config in servers.servers.items():
        if config.transport != STDIO or config.cwd is None:
            continue
        try:
            warm = hub.config(name)
        except Exception:  # noqa: BLE001 - not started in this hub: the drive reports it
            continue
        there = os.path.realpath(warm.cwd or os.getcwd())
        if there != os.path.realpath(config.cwd):
            problems[name] = [
                f"directory: the run's server starts in {config.cwd!r}, the warm one was started in {there!r}"
            ]
    if problems:
        raise ServerMismatchError(
            f"run {run_id}: the servers handed in for it were started elsewhere than the run's; nothing was run:\n  "
            + "\n  ".join(f"server {n!r}: " + "; ".join(d) for n, d in problems.items()),
            hint="start the run's servers with the configurations servers_for_run gives",
            run=run_id,
            servers=sorted(problems),
            differences=problems,
        )
