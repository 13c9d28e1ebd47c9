"""What `recipe serve` runs with: its flags, and the serve configuration file.

The file is the one docs/notifications.md describes (``--config FILE``, else
``$VODOU_SERVE_CONFIG``, ``./vodou-serve.toml``,
``$XDG_CONFIG_HOME/vodou/serve.toml``), read by ``vodou_engine.notify``: its
``[inbox] base_url`` is the address people open the inbox at (sign-in links
and notifications name it, and the app answers to its host name); its
``[[webhooks]]`` and ``[email]`` say who is told when a run parks. Everything
else is a flag.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from ..errors import UsageError
from .identity import LINK_TTL_S, SESSION_TTL_S, URL_ENV

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8400
GRACE_S = 30.0
"""How long running steps get to finish after SIGTERM (the service's own default)."""


@dataclass
class WebConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    url: str | None = None
    """The address people open the inbox at; default ``http://HOST:PORT``."""
    store: str | None = None
    servers: str | None = None
    policy: str | None = None
    session_ttl_s: float = SESSION_TTL_S
    link_ttl_s: float = LINK_TTL_S
    grace_s: float = GRACE_S
    allowed_hosts: list[str] = field(default_factory=list)
    """More host names the app answers to (a guard against DNS rebinding): the bind
    address, localhost and the url's host always are."""
    notify: Any = None
    """The notifier's configuration (``vodou_engine.notify.ServeConfig``), or None."""

    def base_url(self, port: int | None = None) -> str:
        if self.url:
            return self.url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", "[::]", ""):
            host = "127.0.0.1"
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"http://{host}:{port if port is not None else self.port}"

    def hosts(self) -> list[str]:
        names = {"127.0.0.1", "localhost", "::1", "[::1]", self.host, *self.allowed_hosts}
        if self.url:
            names.add(urlsplit(self.url).hostname or "")
        return sorted(n for n in names if n)

    @property
    def secure(self) -> bool:
        """Cookies get ``Secure`` when people reach the inbox over https."""
        return bool(self.url and self.url.lower().startswith("https://"))


def check(cfg: WebConfig) -> None:
    if not (0 <= cfg.port <= 65535):
        raise UsageError(f"--port {cfg.port} is not a TCP port (0-65535); nothing was started", port=cfg.port)
    if cfg.url is not None:
        parts = urlsplit(cfg.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(
                f"the inbox's address {cfg.url!r} must be an http:// or https:// URL; nothing was started", url=cfg.url
            )
    if not cfg.grace_s >= 0:
        raise UsageError("--grace must be 0 seconds or more; nothing was started", grace_s=cfg.grace_s)


def load_notify(path: str | os.PathLike[str] | None) -> Any:
    """The serve configuration file as ``vodou_engine.notify`` reads it (None when that
    module is not there); an invalid file is refused before anything starts."""
    try:
        from .. import notify
    except ImportError as exc:
        if getattr(exc, "name", None) not in ("vodou_engine.notify", None):
            raise
        return None
    return notify.load_serve_config(path)


def from_flags(args: Any) -> WebConfig:
    """The configuration of ``recipe serve``: its flags, and the file's ``[inbox] base_url``."""
    cfg = WebConfig()
    for key in ("host", "port", "store", "servers", "policy"):
        value = getattr(args, key, None)
        if value is not None:
            setattr(cfg, key, value)
    grace = getattr(args, "grace", None)
    if grace is not None:
        cfg.grace_s = float(grace)
    cfg.notify = load_notify(getattr(args, "config", None))
    base = getattr(cfg.notify, "base_url", None)
    cfg.url = base or os.environ.get(URL_ENV) or None
    check(cfg)
    return cfg
