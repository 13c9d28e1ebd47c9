"""The serve configuration file: where it is found, what it may hold, how it is checked.

``recipe serve`` reads it once, before anything starts (``web/config.py``'s
``load_notify``; ``recipe approver add`` reads its ``[inbox] base_url`` for the
sign-in link): ``[inbox] base_url`` (the address people open the inbox at),
``[[webhooks]]`` and ``[email]`` (who is told when a run parks). A file that
cannot be read or is not valid is refused with a :class:`ServeConfigError`
naming the file, the table and the key (docs/notifications.md).

Secrets (a webhook's secret, the SMTP password, ``${ENV}`` references in a
webhook URL) are resolved from the environment here and held in
:class:`Secret`, whose ``repr`` says where a value came from, never what it is.
Kept apart from the sending (``webhook.py``, ``email.py``) so that reading the
file needs neither trio nor an HTTP client.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parseaddr
from pathlib import Path
from typing import Annotated, Literal, overload
from urllib.parse import quote, urlsplit

import msgspec

from ..errors import UsageError
from ..limits import read_regular_file

CONFIG_ENV = "VODOU_SERVE_CONFIG"
"""The environment variable naming the serve configuration file."""

LOCAL_NAME = "vodou-serve.toml"
USER_NAME = "serve.toml"  # under $XDG_CONFIG_HOME/vodou/

_HINT = "see docs/notifications.md"


class ServeConfigError(UsageError):
    """The serve configuration file is missing, unreadable or invalid (exit 2).

    Its ``code`` is ``usage``, as for every other usage error; ``facts`` has
    ``path`` and, where one key is at fault, ``key``.
    """


# --- the file, as written ------------------------------------------------------------------
Tries = Annotated[int, msgspec.Meta(ge=1, le=10)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=600)]
Backoff = Annotated[float, msgspec.Meta(ge=0, le=300)]


class _InboxFile(msgspec.Struct, forbid_unknown_fields=True):
    base_url: str | None = None


class _WebhookFile(msgspec.Struct, forbid_unknown_fields=True):
    url: str
    secret: str | None = None
    secret_env: str | None = None
    name: str | None = None
    timeout_s: Seconds = 10.0
    tries: Tries = 4
    backoff_s: Backoff = 1.0


class _EmailFile(msgspec.Struct, forbid_unknown_fields=True):
    host: str
    sender: str = msgspec.field(name="from")
    approvers: dict[str, str]
    port: Annotated[int, msgspec.Meta(ge=1, le=65535)] | None = None
    security: Literal["starttls", "ssl", "none"] = "starttls"
    username: str | None = None
    password: str | None = None
    password_env: str | None = None
    timeout_s: Seconds = 30.0
    tries: Tries = 3
    backoff_s: Backoff = 1.0


class _ServeFile(msgspec.Struct, forbid_unknown_fields=True):
    inbox: _InboxFile = msgspec.field(default_factory=_InboxFile)
    webhooks: list[_WebhookFile] = []
    email: _EmailFile | None = None


_TABLES: dict[str, type[msgspec.Struct]] = {
    "": _ServeFile,
    "inbox": _InboxFile,
    "webhooks": _WebhookFile,
    "email": _EmailFile,
}


# --- the file, as loaded ---------------------------------------------------------------------
class Secret:
    """A value that must not be shown: ``repr``/``str`` say where it came from, never what it is."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str):
        self._value = value
        self.source = source

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"<secret from {self.source}>"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Webhook:
    name: str
    """How logs and deliveries call it: the ``name`` key, else the URL's scheme, host and port."""
    url: str = field(repr=False)
    secret: Secret
    timeout_s: float = 10.0
    tries: int = 4
    backoff_s: float = 1.0


@dataclass(frozen=True)
class Email:
    host: str
    port: int
    security: str
    sender: str
    approvers: Mapping[str, str]
    username: str | None = None
    password: Secret | None = None
    timeout_s: float = 30.0
    tries: int = 3
    backoff_s: float = 1.0


@dataclass(frozen=True)
class ServeConfig:
    """The serve configuration, loaded and checked; secrets resolved from the environment."""

    source: str | None = None
    """The file it came from (None: no file, nothing configured)."""
    base_url: str | None = None
    webhooks: tuple[Webhook, ...] = ()
    email: Email | None = None

    @property
    def notifies(self) -> bool:
        """Whether a parked run sends anything at all."""
        return bool(self.webhooks or self.email)

    def run_url(self, run_id: str, *, default_base: str | None = None) -> str:
        """The run page's link: ``{base_url}/runs/{run id}``."""
        base = self.base_url or default_base
        if not base:
            raise ServeConfigError(
                "no base URL for links to the inbox",
                hint=f"set [inbox] base_url in the serve configuration; {_HINT}",
                path=self.source,
                key="inbox.base_url",
            )
        return f"{base.rstrip('/')}/runs/{quote(run_id, safe='')}"


# --- finding and loading the file ----------------------------------------------------------
def serve_config_path(
    explicit: str | os.PathLike[str] | None = None, *, cwd: str | None = None, environ: Mapping[str, str] | None = None
) -> str | None:
    """Where the serve configuration comes from: ``--config FILE``, ``$VODOU_SERVE_CONFIG``,
    ``./vodou-serve.toml``, ``$XDG_CONFIG_HOME/vodou/serve.toml`` (``~/.config`` when unset).
    The first two must exist; the last two are used when they do. None: no file."""
    env = os.environ if environ is None else environ
    if explicit:
        return os.fspath(explicit)
    if env.get(CONFIG_ENV):
        return env[CONFIG_ENV]
    local = Path(cwd or os.getcwd()) / LOCAL_NAME
    if local.is_file():
        return str(local)
    xdg = env.get("XDG_CONFIG_HOME", "")
    base = xdg if os.path.isabs(xdg) else os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    user = Path(base) / "vodou" / USER_NAME
    if user.is_file():
        return str(user)
    return None


def load_serve_config(
    explicit: str | os.PathLike[str] | None = None, *, cwd: str | None = None, environ: Mapping[str, str] | None = None
) -> ServeConfig:
    """The serve configuration in effect (an empty one when there is no file).

    Raises :class:`ServeConfigError` (exit 2) for a file that cannot be read
    or is not valid, naming the file and the key."""
    env = os.environ if environ is None else environ
    path = serve_config_path(explicit, cwd=cwd, environ=env)
    if path is None:
        return ServeConfig()
    return load_config_file(path, environ=env)


def load_config_file(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> ServeConfig:
    """Read, check and resolve one serve configuration file."""
    env = os.environ if environ is None else environ
    path = os.fspath(path)
    try:
        raw = read_regular_file(path)  # a FIFO or device is refused, not waited on; at most 16 MiB
    except OSError as exc:
        raise ServeConfigError(
            f"cannot read the serve configuration {path}: {exc.strerror or exc}",
            hint=f"check the path given with --config or ${CONFIG_ENV}; {_HINT}",
            path=path,
        ) from None
    try:
        data = msgspec.toml.decode(raw, type=_ServeFile)
    except msgspec.ValidationError as exc:
        raise _validation_error(path, str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ServeConfigError(f"{path}: not valid TOML: {exc}", hint=_HINT, path=path) from None
    except RecursionError:
        raise ServeConfigError(
            f"{path}: not a valid serve configuration: a value is nested too deep", hint=_HINT, path=path
        ) from None
    return _resolve(path, data, env)


def _validation_error(path: str, message: str) -> ServeConfigError:
    m = re.match(r"(.*?)(?: - at `\$(.*)`)?$", message, re.S)
    what, where = (m.group(1), m.group(2) or "") if m else (message, "")
    table = re.sub(r"\[\d+\]", "", where).replace("[...]", "").lstrip(".")
    hint = _HINT
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", what)
    missing = re.fullmatch(r"Object missing required field `(.*)`", what)
    field_match = unknown or missing
    key: str | None  # the key the message is about, when it names one
    if field_match:  # about a table's keys: name the table
        name = field_match.group(1)
        what = f"unknown key `{name}`" if unknown else f"missing key `{name}`"
        key = f"{table}.{name}".lstrip(".")
        if unknown and table in _TABLES:
            hint = f"keys allowed here: {', '.join(f.encode_name for f in msgspec.structs.fields(_TABLES[table]))}; {_HINT}"
        place = _table(where)
    else:  # about one value: name its key
        key = table or None
        place = _key(where)
        what = what[:1].lower() + what[1:]
        what = what.replace(" | null`", "`")  # TOML has no null: a key is either given or left out
    return ServeConfigError(f"{path}: {place}{': ' if place else ''}{what}", hint=hint, path=path, key=key)


def _parts(path: str) -> tuple[list[str], int | None]:
    names, entry = [], None
    for name, index in re.findall(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]", path):
        if index == "...":  # a value of a table of names (``[email.approvers]``)
            names.append("*")
        elif index:
            entry = int(index) + 1
        else:
            names.append(name)
    return names, entry


def _table(path: str) -> str:
    """msgspec's ``.webhooks[0]`` as a person reads the file: ``[[webhooks]] entry 1``; the top level is ``""``."""
    names, entry = _parts(path)
    if not names:
        return ""
    if entry is not None:
        return f"[[{names[0]}]] entry {entry}" + "".join(f".{n}" for n in names[1:])
    return f"[{'.'.join(names)}]"


def _key(path: str) -> str:
    """msgspec's ``.webhooks[0].tries`` as ``[[webhooks]] entry 1, key `tries```; ``.email.port`` as ``[email] key `port```."""
    names, entry = _parts(path)
    if not names:
        return ""
    if entry is not None and len(names) == 1:
        return f"[[{names[0]}]] entry {entry}"
    if entry is not None:
        return f"[[{names[0]}]] entry {entry}, key `{'.'.join(names[1:])}`"
    if len(names) == 1:
        return f"key `{names[0]}`"
    if names[-1] == "*":
        return f"[{'.'.join(names[:-1])}] a value"
    return f"[{'.'.join(names[:-1])}] key `{names[-1]}`"


_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@overload
def _secret(
    path: str,
    where: str,
    table: str,
    key: str,
    literal: str | None,
    env_name: str | None,
    env: Mapping[str, str],
    *,
    required: Literal[True],
) -> Secret: ...
@overload
def _secret(
    path: str,
    where: str,
    table: str,
    key: str,
    literal: str | None,
    env_name: str | None,
    env: Mapping[str, str],
    *,
    required: bool,
) -> Secret | None: ...
def _secret(
    path: str,
    where: str,
    table: str,
    key: str,
    literal: str | None,
    env_name: str | None,
    env: Mapping[str, str],
    *,
    required: bool,
) -> Secret | None:
    """One secret, from ``key`` (a literal, or with ``${ENV}`` references) or ``key_env`` (an env var's name)."""
    if literal is not None and env_name is not None:
        raise ServeConfigError(
            f"{path}: {where}: give `{key}` or `{key}_env`, not both", hint=_HINT, path=path, key=f"{table}.{key}"
        )
    if env_name is not None:
        if not _ENV_NAME.fullmatch(env_name):
            raise ServeConfigError(
                f"{path}: {where}: `{key}_env` must be the name of an environment variable",
                hint=_HINT,
                path=path,
                key=f"{table}.{key}_env",
            )
        value = env.get(env_name, "")
        if not value:
            raise ServeConfigError(
                f"{path}: {where}: `{key}_env` names ${env_name}, which is not set (or empty)",
                hint=f"set {env_name} in the environment of `recipe serve`; {_HINT}",
                path=path, key=f"{table}.{key}_env", variable=env_name,
            )  # fmt: skip
        return Secret(value, f"${env_name}")
    if literal is not None:
        names = _ENV_REF.findall(literal)
        for name in names:
            if not env.get(name):
                raise ServeConfigError(
                    f"{path}: {where}: `{key}` refers to ${{{name}}}, which is not set (or empty)",
                    hint=f"set {name} in the environment of `recipe serve`; {_HINT}",
                    path=path, key=f"{table}.{key}", variable=name,
                )  # fmt: skip
        value = _ENV_REF.sub(lambda m: env[m.group(1)], literal)
        if not value:
            raise ServeConfigError(f"{path}: {where}: `{key}` is empty", hint=_HINT, path=path, key=f"{table}.{key}")
        return Secret(value, ", ".join(f"${n}" for n in names) if names else path)
    if required:
        raise ServeConfigError(
            f"{path}: {where}: a `{key}` is needed (or `{key}_env`, naming an environment variable that holds it)",
            hint=_HINT,
            path=path,
            key=f"{table}.{key}",
        )
    return None


def _http_url(path: str, where: str, table: str, key: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServeConfigError(
            f"{path}: {where}: `{key}` must be an http:// or https:// URL with a host",
            hint=_HINT,
            path=path,
            key=f"{table}.{key}",
        )
    try:
        _ = parts.port  # raises ValueError when the port is not a number
    except ValueError:
        raise ServeConfigError(
            f"{path}: {where}: `{key}` has a port that is not a number", hint=_HINT, path=path, key=f"{table}.{key}"
        ) from None
    return url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _address(path: str, where: str, table: str, key: str, value: str) -> str:
    addr = parseaddr(value)[1]
    if (
        re.search(r"[\x00-\x1f\x7f]", value)
        or "@" not in addr
        or not addr.partition("@")[0]
        or not addr.partition("@")[2]
    ):
        raise ServeConfigError(
            f"{path}: {where}: `{key}` is not an email address: {value!r}", hint=_HINT, path=path, key=f"{table}.{key}"
        )
    return value


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _resolve(path: str, data: _ServeFile, env: Mapping[str, str]) -> ServeConfig:
    base_url = data.inbox.base_url
    if base_url is not None:
        base_url = _http_url(path, "[inbox]", "inbox", "base_url", base_url)
    hooks = []
    for i, w in enumerate(data.webhooks, 1):
        where = f"[[webhooks]] entry {i}"
        refs = _ENV_REF.findall(w.url)
        for name in refs:
            if not env.get(name):
                raise ServeConfigError(
                    f"{path}: {where}: `url` refers to ${{{name}}}, which is not set (or empty)",
                    hint=f"set {name} in the environment of `recipe serve`; {_HINT}",
                    path=path, key="webhooks.url", variable=name,
                )  # fmt: skip
        url = _http_url(path, where, "webhooks", "url", _ENV_REF.sub(lambda m: env[m.group(1)], w.url))
        secret = _secret(path, where, "webhooks", "secret", w.secret, w.secret_env, env, required=True)
        hooks.append(
            Webhook(
                name=w.name or _origin(url),
                url=url,
                secret=secret,
                timeout_s=w.timeout_s,
                tries=w.tries,
                backoff_s=w.backoff_s,
            )
        )
    names = [h.name for h in hooks]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ServeConfigError(
            f"{path}: two webhooks are called {dup!r}",
            hint=f"give each a different `name`; {_HINT}",
            path=path,
            key="webhooks.name",
        )
    email = None
    if data.email is not None:
        e = data.email
        where = "[email]"
        if not e.host.strip():
            raise ServeConfigError(f"{path}: {where}: `host` is empty", hint=_HINT, path=path, key="email.host")
        sender = _address(path, where, "email", "from", e.sender)
        if not e.approvers:
            raise ServeConfigError(
                f"{path}: [email.approvers] is empty: nobody would get an email",
                hint='name each approver with their address, e.g. ana = "ana@example.org"; ' + _HINT,
                path=path, key="email.approvers",
            )  # fmt: skip
        approvers = {
            name: _address(path, "[email.approvers]", "email.approvers", name, addr)
            for name, addr in e.approvers.items()
        }
        password = _secret(path, where, "email", "password", e.password, e.password_env, env, required=False)
        if password is not None and not e.username:
            raise ServeConfigError(
                f"{path}: {where}: a password is given but no `username`", hint=_HINT, path=path, key="email.username"
            )
        if e.username and password is None:
            raise ServeConfigError(
                f"{path}: {where}: `username` is given but no `password_env` (or `password`)",
                hint=_HINT,
                path=path,
                key="email.password_env",
            )
        if password is not None and e.security == "none" and not _loopback(e.host):
            raise ServeConfigError(
                f"{path}: {where}: a password would be sent unencrypted to {e.host}",
                hint='use security = "starttls" or "ssl"; ' + _HINT,
                path=path, key="email.security",
            )  # fmt: skip
        port = e.port or {"starttls": 587, "ssl": 465, "none": 25}[e.security]
        email = Email(
            host=e.host, port=port, security=e.security, sender=sender, approvers=approvers, username=e.username, password=password,
            timeout_s=e.timeout_s, tries=e.tries, backoff_s=e.backoff_s,
        )  # fmt: skip
    if (hooks or email) and not base_url:
        raise ServeConfigError(
            f"{path}: [inbox] base_url is needed: every notification links to the run page",
            hint='e.g. [inbox] base_url = "https://vodou.example.org" (the address approvers open); ' + _HINT,
            path=path, key="inbox.base_url",
        )  # fmt: skip
    return ServeConfig(source=path, base_url=base_url, webhooks=tuple(hooks), email=email)
