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

* ``config.py``: the serve configuration file: found, read, checked; its secrets.
* ``text.py``: what a notification says (the summary, the card, the note).
* ``delivery.py``: :class:`Delivery`, how one notification went; backoff and scrubbing.
* ``webhook.py``: the signature, the body, one webhook delivered with retries.
* ``email.py``: one message per approver, sent over SMTP with retries.
* ``parked.py``: :func:`notify_parked`, every webhook and approver at once.

Every module logs as ``vodou_engine.notify``. The names below are the ones
the rest of the engine, its tests and docs/notifications.md import from here.
"""

from __future__ import annotations

from .config import Email, ServeConfig, ServeConfigError, load_config_file, load_serve_config, serve_config_path
from .delivery import Delivery
from .email import email_message
from .parked import notify_parked
from .text import NOTE
from .webhook import sign

__all__ = [
    "NOTE",
    "Delivery",
    "Email",
    "ServeConfig",
    "ServeConfigError",
    "email_message",
    "load_config_file",
    "load_serve_config",
    "notify_parked",
    "serve_config_path",
    "sign",
]
