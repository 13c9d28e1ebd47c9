"""Who is at the browser: one-time sign-in links, signed session cookies, form tokens.

Light on purpose (the standard library and the store; the serve configuration only
when no address is given): the CLI imports it
for ``recipe approver add NAME``, which prints a sign-in link.

* A **sign-in link** carries a random token (256 bits). The store keeps only
  its sha256, with the approver's name, who made it and when it expires
  (default one day). Opening the link shows a page with one button; the
  link is spent by that button's POST (a GET never changes anything, so a
  chat client or mail scanner that fetches the link to preview it does not
  use it up). Spending is a compare-and-set: one link, one browser.
* A **session** is a random id (256 bits) in a cookie ``vodou_session``,
  signed with HMAC-SHA256 under the store's key, ``HttpOnly``,
  ``SameSite=Strict``, ``Path=/`` (``Secure`` when the inbox is served over
  https). The store keeps the sha256 of the id, so a copy of the store does
  not let anyone sign in; signing means a guessed or altered cookie is
  refused before the store is asked. A session lasts seven days by default,
  ends at "Sign out", and ends at once when its approver is removed or given
  a new secret (``recipe approver add NAME`` again).
* A **form token** (CSRF) is HMAC-SHA256 of the session id under the same
  key, in a hidden field of every form; a POST without the right one is
  refused (403) before anything else is looked at. The sign-in form, which
  has no session yet, uses a token bound to a short-lived pre-session cookie
  the sign-in page sets.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time
from typing import Any

LINK_TTL_S = 24 * 3600.0
"""How long a sign-in link can be used (once)."""
SESSION_TTL_S = 7 * 24 * 3600.0
"""How long a session lasts after sign-in."""
DEFAULT_URL = "http://127.0.0.1:8400"
URL_ENV = "VODOU_SERVE_URL"
"""The address people open the inbox at, when it is not the default (links name it)."""

SESSION_COOKIE = "vodou_session"
PRE_COOKIE = "vodou_signin"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def default_base_url(config: str | os.PathLike[str] | None = None) -> str:
    """Where people open the inbox, as ``recipe serve`` names it: the serve configuration's
    ``[inbox] base_url`` (``config``, else the file found the usual way), else
    ``$VODOU_SERVE_URL``, else ``http://127.0.0.1:8400``."""
    base = None
    try:
        from ..notify import load_serve_config

        base = load_serve_config(config).base_url
    except Exception:  # noqa: BLE001 - no notifier, or a file serve itself would refuse: the other defaults
        base = None
    return (base or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def _store_of(runs_or_store: Any) -> Any:
    store = getattr(runs_or_store, "store", None)
    return store() if callable(store) else runs_or_store


def sign_in_link(
    runs_or_store: Any,
    name: str,
    *,
    by: str,
    base_url: str | None = None,
    ttl_s: float = LINK_TTL_S,
    now: float | None = None,
) -> str:
    """A one-time sign-in link for the approver ``name`` (who must exist in the store).

    ``runs_or_store``: a :class:`~vodou_engine.runs.Runs` or a store. ``base_url``:
    where the inbox is reached (default: :func:`default_base_url`). Only the
    sha256 of the link's token is kept."""
    if not ttl_s > 0:
        from ..errors import UsageError

        raise UsageError("a sign-in link must live more than 0 seconds", ttl_s=ttl_s)
    token = secrets.token_urlsafe(32)
    now = time.time() if now is None else now
    _store_of(runs_or_store).add_web_link(sha256(token), name, by=by, expires_at=now + ttl_s, now=now)
    return f"{(base_url or default_base_url()).rstrip('/')}/signin?token={token}"


def add_approver(
    runs: Any, name: str, *, by: str, base_url: str | None = None, ttl_s: float = LINK_TTL_S
) -> tuple[str, str]:
    """What ``recipe approver add NAME`` does: (the secret for ``--as``, a one-time sign-in link).

    Giving a name a new secret revokes its old secret, its unused links and
    its sessions; the link returned is the new one."""
    secret = runs.add_approver(name, by=by)
    return secret, sign_in_link(runs, name, by=by, base_url=base_url, ttl_s=ttl_s)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class Signer:
    """HMAC-SHA256 under the store's web key, each use under its own label."""

    def __init__(self, key_hex: str):
        self._key = bytes.fromhex(key_hex)

    def _mac(self, label: str, value: str) -> str:
        return _b64(hmac.new(self._key, f"{label}|{value}".encode(), hashlib.sha256).digest())

    def sign(self, value: str, label: str = "cookie") -> str:
        return f"{value}.{self._mac(label, value)}"

    def unsign(self, signed: str | None, label: str = "cookie") -> str | None:
        """The value if the signature is right, else None."""
        if not signed or "." not in signed or len(signed) > 200:
            return None
        value, _, mac = signed.rpartition(".")
        return value if value and hmac.compare_digest(mac, self._mac(label, value)) else None

    def form_token(self, session_id: str) -> str:
        return self._mac("csrf", session_id)

    def form_token_ok(self, session_id: str | None, token: str | None) -> bool:
        if not session_id or not token:
            return False
        return hmac.compare_digest(token.encode("utf-8", "replace"), self.form_token(session_id).encode())


def new_secret() -> str:
    return secrets.token_urlsafe(32)
