"""Telling approvers that a run is waiting for them: signed webhooks and email.

``recipe serve`` loads one configuration file (:func:`load_serve_config`,
docs/notifications.md) and, when a run parks, calls :func:`notify_parked`
from a task of its own. A notification only *points* at the run page: it
carries no token, no form and no link that decides anything. Deciding needs
a signed-in approver and a POST on that page.

A failed delivery is logged and returned as a :class:`Delivery`, never raised:
a run must not fail because a webhook is down. Secrets (a webhook's secret,
the SMTP password, a webhook URL, which can hold a token itself) never appear
in a log line, an error or a ``repr``.

Webhooks go out on trio (httpx2, through anyio); SMTP runs on a worker thread
(stdlib ``smtplib``), so neither blocks the service's trio thread.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import re
import smtplib
import ssl
import time
import uuid
from dataclasses import dataclass, field
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid, parseaddr
from pathlib import Path
from typing import Annotated, Any, Awaitable, Callable, Literal, Mapping
from urllib.parse import quote, urlsplit

import msgspec
import trio

from .errors import UsageError
from .limits import read_regular_file
from .reports import Doc, PendingApproval, RunReport
from .text_safety import quote as quoted
from .text_safety import shown, visible

logger = logging.getLogger("vodou_engine.notify")

CONFIG_ENV = "VODOU_SERVE_CONFIG"
"""The environment variable naming the serve configuration file."""

LOCAL_NAME = "vodou-serve.toml"
USER_NAME = "serve.toml"  # under $XDG_CONFIG_HOME/vodou/

EVENT = "approval.parked"
SIGNATURE_VERSION = "v1"
MAX_CARD_CHARS = 64 * 1024
"""A card longer than this is cut in a notification (the run page shows it whole)."""

NOTE = (
    "This notification cannot approve anything by itself: the link only opens the run page. "
    "To decide, sign in there as one of the approvers and press Approve or Reject."
)

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


_TABLES: dict[str, type[msgspec.Struct]] = {"": _ServeFile, "inbox": _InboxFile, "webhooks": _WebhookFile, "email": _EmailFile}


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
                "no base URL for links to the inbox", hint=f"set [inbox] base_url in the serve configuration; {_HINT}", path=self.source, key="inbox.base_url"
            )
        return f"{base.rstrip('/')}/runs/{quote(run_id, safe='')}"


class Delivery(Doc):
    """How one notification went: one webhook POST, or one email to one approver."""

    kind: Literal["webhook", "email"]
    target: str
    """The webhook's name, or ``approver <address>``; never a full webhook URL."""
    run: str
    step: str
    approval: str
    status: Literal["sent", "failed", "skipped"]
    tries: int = 0
    error: str | None = None
    http_status: int | None = None
    delivery_id: str | None = None
    """A webhook's ``X-Vodou-Delivery``: the same on every retry of one notification."""

    @property
    def ok(self) -> bool:
        return self.status == "sent"


# --- finding and loading the file ----------------------------------------------------------
def serve_config_path(explicit: str | os.PathLike[str] | None = None, *, cwd: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
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


def load_serve_config(explicit: str | os.PathLike[str] | None = None, *, cwd: str | None = None, environ: Mapping[str, str] | None = None) -> ServeConfig:
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
        raise ServeConfigError(f"{path}: not a valid serve configuration: a value is nested too deep", hint=_HINT, path=path) from None
    return _resolve(path, data, env)


def _validation_error(path: str, message: str) -> ServeConfigError:
    m = re.match(r"(.*?)(?: - at `\$(.*)`)?$", message, re.S)
    what, where = (m.group(1), m.group(2) or "") if m else (message, "")
    table = re.sub(r"\[\d+\]", "", where).replace("[...]", "").lstrip(".")
    hint = _HINT
    unknown = re.fullmatch(r"Object contains unknown field `(.*)`", what)
    missing = re.fullmatch(r"Object missing required field `(.*)`", what)
    if unknown or missing:  # about a table's keys: name the table
        name = (unknown or missing).group(1)
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


def _secret(path: str, where: str, table: str, key: str, literal: str | None, env_name: str | None, env: Mapping[str, str], *, required: bool) -> Secret | None:
    """One secret, from ``key`` (a literal, or with ``${ENV}`` references) or ``key_env`` (an env var's name)."""
    if literal is not None and env_name is not None:
        raise ServeConfigError(f"{path}: {where}: give `{key}` or `{key}_env`, not both", hint=_HINT, path=path, key=f"{table}.{key}")
    if env_name is not None:
        if not _ENV_NAME.fullmatch(env_name):
            raise ServeConfigError(f"{path}: {where}: `{key}_env` must be the name of an environment variable", hint=_HINT, path=path, key=f"{table}.{key}_env")
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
            f"{path}: {where}: a `{key}` is needed (or `{key}_env`, naming an environment variable that holds it)", hint=_HINT, path=path, key=f"{table}.{key}"
        )
    return None


def _http_url(path: str, where: str, table: str, key: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServeConfigError(f"{path}: {where}: `{key}` must be an http:// or https:// URL with a host", hint=_HINT, path=path, key=f"{table}.{key}")
    try:
        parts.port
    except ValueError:
        raise ServeConfigError(f"{path}: {where}: `{key}` has a port that is not a number", hint=_HINT, path=path, key=f"{table}.{key}") from None
    return url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _address(path: str, where: str, table: str, key: str, value: str) -> str:
    addr = parseaddr(value)[1]
    if re.search(r"[\x00-\x1f\x7f]", value) or "@" not in addr or not addr.partition("@")[0] or not addr.partition("@")[2]:
        raise ServeConfigError(f"{path}: {where}: `{key}` is not an email address: {value!r}", hint=_HINT, path=path, key=f"{table}.{key}")
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
            Webhook(name=w.name or _origin(url), url=url, secret=secret, timeout_s=w.timeout_s, tries=w.tries, backoff_s=w.backoff_s)
        )
    names = [h.name for h in hooks]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ServeConfigError(f"{path}: two webhooks are called {dup!r}", hint=f"give each a different `name`; {_HINT}", path=path, key="webhooks.name")
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
        approvers = {name: _address(path, "[email.approvers]", "email.approvers", name, addr) for name, addr in e.approvers.items()}
        password = _secret(path, where, "email", "password", e.password, e.password_env, env, required=False)
        if password is not None and not e.username:
            raise ServeConfigError(f"{path}: {where}: a password is given but no `username`", hint=_HINT, path=path, key="email.username")
        if e.username and password is None:
            raise ServeConfigError(
                f"{path}: {where}: `username` is given but no `password_env` (or `password`)", hint=_HINT, path=path, key="email.password_env"
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


# --- the signature ---------------------------------------------------------------------------
def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """``X-Vodou-Signature``'s value: ``v1=`` + hex HMAC-SHA256(secret, timestamp + "." + body)."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


# --- what a notification says ----------------------------------------------------------------
class WebhookBody(Doc):
    event: str
    delivery: str
    run: str
    recipe: str
    step: str
    approval: str
    fingerprint: str
    expires_at: float | None
    approvers: list[str]
    url: str
    card: str
    text: str
    note: str = NOTE


def _card(card: str) -> str:
    """The card as the run page shows it (rendered from the frozen payload when the run
    parked; every hidden character marked, ``text_safety.shown``), cut when very long."""
    card = shown(card)
    if len(card) <= MAX_CARD_CHARS:
        return card
    return card[:MAX_CARD_CHARS] + "\n… (cut here; the run page shows the whole card)"


def _when(expires_at: float | None, now: float) -> str | None:
    if expires_at is None:
        return None
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(expires_at))
    left = int(expires_at - now)
    if left <= 0:
        return f"{stamp} (already passed)"
    h, m = divmod(left // 60, 60)
    return f"{stamp} (in {h} h {m} min)" if h else f"{stamp} (in {max(m, 1)} min)"


def summary(report: RunReport, p: PendingApproval, run_url: str, now: float) -> str:
    """A short human text: what waits, for whom, until when, and where to decide (names from
    the recipe shown as every surface shows them: ``text_safety.visible``)."""
    lines = [f"Run {visible(report.run)} of recipe {quoted(report.recipe or '(unnamed)')} is waiting for an approval at step {quoted(p.step)}."]
    lines.append("Who may decide: " + (", ".join(visible(a) for a in p.approvers) if p.approvers else "any approver"))
    when = _when(p.expires_at, now)
    if when:
        lines.append(f"Expires: {when}")
    lines.append(f"Open the run page to decide: {run_url}")
    lines.append(NOTE)
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return shown(re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip())


def email_message(config: Email, report: RunReport, p: PendingApproval, approver: str, address: str, run_url: str, now: float) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = config.sender
    msg["To"] = formataddr((approver, parseaddr(address)[1]))
    msg["Subject"] = _one_line(f"Approval needed: {report.recipe or report.run} · {p.step}")[:200]
    msg["Date"] = formatdate(now, localtime=False)
    domain = parseaddr(config.sender)[1].rpartition("@")[2] or None
    msg["Message-ID"] = make_msgid("vodou", domain=domain)
    msg["Auto-Submitted"] = "auto-generated"
    msg["X-Vodou-Run"] = _one_line(report.run)
    msg["X-Vodou-Approval"] = _one_line(p.approval)
    body = [
        f"Hello {approver},",
        "",
        summary(report, p, run_url, now),
        "",
        "The card, as the run page shows it:",
        "",
        _card(p.card) or "(no card text)",
        "",
        f"Fingerprint: {p.fingerprint}",
        "",
        "-- ",
        "vodou_engine (recipe serve). You get this because you may decide on this run.",
    ]
    msg.set_content("\n".join(body) + "\n")
    return msg


# --- delivering ------------------------------------------------------------------------------
Sleep = Callable[[float], Awaitable[Any]]


def _scrub(text: str, *secrets: str | None) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "[secret]")
    return text


def _delay(backoff_s: float, attempt: int) -> float:
    """Before try ``attempt + 1``: backoff_s, 2×, 4× … (at most 5 minutes)."""
    return min(backoff_s * (2 ** (attempt - 1)), 300.0)


async def notify_parked(
    config: ServeConfig | None,
    report: RunReport,
    run_url: str,
    *,
    sleep: Sleep = trio.sleep,
    clock: Callable[[], float] = time.time,
) -> list[Delivery]:
    """Notify every configured webhook and every approver with an address, for each pending approval.

    Called from a task of the service when a run parks (``Service(on_parked=...)``);
    ``run_url`` is the run page's link (``config.run_url(report.run)``).
    Webhooks and email go out concurrently; a webhook is retried on a
    connection error, a timeout, 408, 429 and 5xx, and email on a dropped
    connection or a 4xx answer, waiting ``backoff_s`` × 1, 2, 4 … between tries
    (``sleep`` and ``clock`` are injectable for tests). Never raises for a failed
    delivery: each one is logged and returned, in a stable order (per pending
    approval: webhooks in file order, then email per approver). Only
    cancellation propagates.
    """
    if config is None or not config.notifies or not report.pending:
        return []
    results: dict[int, Delivery] = {}
    try:
        await _notify(config, report, run_url, sleep, clock, results)
    except Exception as exc:  # noqa: BLE001 - not even a bug here may fail the run
        logger.error("run %s: notifying stopped early: %s", report.run, _scrub(f"{type(exc).__name__}: {exc}", *_secrets_of(config)))
    return [results[i] for i in sorted(results)]


def _secrets_of(config: ServeConfig) -> list[str]:
    out = [s for h in config.webhooks for s in (h.secret.reveal(), h.url)]
    if config.email is not None and config.email.password is not None:
        out.append(config.email.password.reveal())
    return out


async def _notify(config: ServeConfig, report: RunReport, run_url: str, sleep: Sleep, clock: Callable[[], float], results: dict[int, Delivery]) -> None:
    now = clock()
    hooks: list[tuple[int, Webhook, PendingApproval]] = []
    mail: list[tuple[int, EmailMessage, PendingApproval, str]] = []
    slot = 0
    for p in report.pending:
        if p.tampered:  # no card to show and nothing to decide: the run page says why
            logger.warning("run %s step %s: nobody notified: %s", report.run, p.step, p.refusal)
            continue
        for hook in config.webhooks:
            hooks.append((slot, hook, p))
            slot += 1
        if config.email is None:
            continue
        for name in p.approvers or sorted(config.email.approvers):  # no approvers named: anyone may decide
            address = config.email.approvers.get(name)
            if address is None:
                results[slot] = d = Delivery(
                    kind="email", target=name, run=report.run, step=p.step, approval=p.approval, status="skipped",
                    error=f"no address for approver {name!r} in [email.approvers]",
                )  # fmt: skip
                logger.info("run %s step %s: no email to %s: %s", report.run, p.step, name, d.error)
            else:
                message = email_message(config.email, report, p, name, address, run_url, now)
                mail.append((slot, message, p, f"{name} <{parseaddr(address)[1]}>"))
            slot += 1
    client = None
    if hooks:
        import httpx2

        client = httpx2.AsyncClient(follow_redirects=False)
    try:
        async with trio.open_nursery() as nursery:

            async def webhook(i: int, hook: Webhook, p: PendingApproval) -> None:
                results[i] = await _webhook(client, hook, report, p, run_url, sleep, clock)

            async def emails() -> None:
                for (i, *_), d in zip(mail, await _emails(config.email, report, mail, sleep)):
                    results[i] = d

            for i, hook, p in hooks:
                nursery.start_soon(webhook, i, hook, p)
            if mail:
                nursery.start_soon(emails)
    finally:
        if client is not None:
            with trio.CancelScope(shield=True):
                await client.aclose()


async def _webhook(client: Any, hook: Webhook, report: RunReport, p: PendingApproval, run_url: str, sleep: Sleep, clock: Callable[[], float]) -> Delivery:
    import httpx2

    delivery_id = uuid.uuid4().hex
    secret = hook.secret.reveal()

    def done(status: str, tries: int, error: str | None = None, http_status: int | None = None) -> Delivery:
        d = Delivery(
            kind="webhook", target=hook.name, run=report.run, step=p.step, approval=p.approval, status=status, tries=tries,
            error=_scrub(error, secret, hook.url) if error else None, http_status=http_status, delivery_id=delivery_id,
        )  # fmt: skip
        if d.ok:
            logger.info("run %s step %s: webhook %s delivered (try %d)", report.run, p.step, hook.name, tries)
        else:
            logger.warning("run %s step %s: webhook %s not delivered after %d tr%s: %s", report.run, p.step, hook.name, tries, "y" if tries == 1 else "ies", d.error)
        return d

    try:
        body = msgspec.json.encode(
            WebhookBody(
                event=EVENT, delivery=delivery_id, run=report.run, recipe=report.recipe, step=p.step, approval=p.approval,
                fingerprint=p.fingerprint, expires_at=p.expires_at, approvers=list(p.approvers), url=run_url, card=_card(p.card),
                text=summary(report, p, run_url, clock()),
            )
        )  # fmt: skip
        from . import __version__

        error = None
        status = None
        for attempt in range(1, hook.tries + 1):
            timestamp = str(int(clock()))
            headers = {
                "Content-Type": "application/json",
                "User-Agent": f"vodou-engine/{__version__}",
                "X-Vodou-Event": EVENT,
                "X-Vodou-Delivery": delivery_id,
                "X-Vodou-Timestamp": timestamp,
                "X-Vodou-Signature": sign(secret, timestamp, body),
            }
            retry = False
            try:
                async with client.stream("POST", hook.url, content=body, headers=headers, timeout=hook.timeout_s) as response:
                    status = response.status_code  # the answer's body is never read: a receiver cannot make us hold much
            except httpx2.TransportError as exc:
                status = None
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                retry = True
            else:
                if 200 <= status < 300:
                    return done("sent", attempt, http_status=status)
                retry = status >= 500 or status in (408, 429)
                error = f"the receiver answered HTTP {status}" + ("" if retry else " (not retried)")
            if not retry:
                return done("failed", attempt, error, status)
            if attempt < hook.tries:
                await sleep(_delay(hook.backoff_s, attempt))
        return done("failed", hook.tries, error, status)
    except Exception as exc:  # noqa: BLE001 - a notification never fails the run
        return done("failed", 0, f"{type(exc).__name__}: {exc}")


async def _emails(config: Email, report: RunReport, mail: list[tuple[int, EmailMessage, PendingApproval, str]], sleep: Sleep) -> list[Delivery]:
    """Send every message over one SMTP connection per try; retry those that met a transient error."""
    password = config.password.reveal() if config.password is not None else None
    outcome: list[tuple[str, str | None]] = [("pending", None)] * len(mail)
    tries = [0] * len(mail)
    for attempt in range(1, config.tries + 1):
        todo = [i for i, (state, _) in enumerate(outcome) if state in ("pending", "transient")]
        if not todo:
            break
        try:
            got = await trio.to_thread.run_sync(_smtp_try, config, [mail[i][1] for i in todo], abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - a notification never fails the run
            got = [("failed", f"{type(exc).__name__}: {exc}")] * len(todo)
        for i, result in zip(todo, got):
            outcome[i] = result
            tries[i] = attempt
        if attempt < config.tries and any(outcome[i][0] == "transient" for i in todo):
            await sleep(_delay(config.backoff_s, attempt))
    out = []
    for (_, _, p, target), (state, error), n in zip(mail, outcome, tries):
        ok = state == "sent"
        d = Delivery(
            kind="email", target=target, run=report.run, step=p.step, approval=p.approval, status="sent" if ok else "failed", tries=n,
            error=None if ok else _scrub(error or "not sent", password),
        )  # fmt: skip
        if ok:
            logger.info("run %s step %s: email to %s sent (try %d)", report.run, p.step, target, n)
        else:
            logger.warning("run %s step %s: email to %s not sent after %d tr%s: %s", report.run, p.step, target, n, "y" if n == 1 else "ies", d.error)
        out.append(d)
    return out


def _smtp_error(exc: BaseException) -> tuple[str, str]:
    """(transient | failed, message) for an error of one SMTP try."""
    if isinstance(exc, smtplib.SMTPResponseException):
        text = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        kind = "transient" if 400 <= exc.smtp_code < 500 else "failed"
        return kind, f"{type(exc).__name__}: the server answered {exc.smtp_code} {_one_line(text)}"
    if isinstance(exc, smtplib.SMTPServerDisconnected):
        return "transient", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, (smtplib.SMTPException, ssl.SSLCertVerificationError)):  # no STARTTLS, no AUTH, a bad certificate: trying again changes nothing
        return "failed", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, OSError):  # refused, reset, timed out
        return "transient", f"{type(exc).__name__}: {exc}"
    return "failed", f"{type(exc).__name__}: {exc}"


def _smtp_try(config: Email, messages: list[EmailMessage]) -> list[tuple[str, str | None]]:
    """One connection: log in, send each message. On a worker thread (blocking)."""
    context = ssl.create_default_context()
    try:
        if config.security == "ssl":
            smtp: smtplib.SMTP = smtplib.SMTP_SSL(config.host, config.port, timeout=config.timeout_s, context=context)
        else:
            smtp = smtplib.SMTP(config.host, config.port, timeout=config.timeout_s)
    except Exception as exc:  # noqa: BLE001
        return [_smtp_error(exc)] * len(messages)
    out: list[tuple[str, str | None]] = []
    try:
        if config.security == "starttls":
            smtp.starttls(context=context)  # never falls back to plain text: no STARTTLS is an error
        if config.username and config.password is not None:
            smtp.login(config.username, config.password.reveal())
        for msg in messages:
            try:
                refused = smtp.send_message(msg)
            except smtplib.SMTPRecipientsRefused as exc:
                code, text = next(iter(exc.recipients.values()), (550, b"refused"))
                text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
                out.append(("transient" if 400 <= code < 500 else "failed", f"the server refused the recipient: {code} {_one_line(text)}"))
            except smtplib.SMTPResponseException as exc:  # this message refused; the connection goes on
                out.append(_smtp_error(exc))
            except Exception as exc:  # noqa: BLE001 - the connection is gone: this and the rest are tried again
                out.append(_smtp_error(exc))
                break
            else:
                out.append(("sent", None) if not refused else ("failed", f"the server refused the recipient: {refused}"))
    except Exception as exc:  # noqa: BLE001 - a failure before the first message: all of them share it
        kind, text = _smtp_error(exc)
        out.extend([(kind, text)] * (len(messages) - len(out)))
    finally:
        try:
            smtp.quit()
        except Exception:  # noqa: BLE001
            smtp.close()
    if len(out) < len(messages):  # the connection dropped mid-way: the rest are tried again
        out.extend([("transient", "the connection closed before this message was sent")] * (len(messages) - len(out)))
    return out
