"""How one notification went (:class:`Delivery`), and the rules every channel shares.

A failed delivery is returned as a :class:`Delivery`, never raised: a run must
not fail because a webhook is down. Webhooks and email retry alike, waiting
``backoff_s`` × 1, 2, 4 … between tries (:func:`_delay`), and an error they
report has every secret replaced by ``[secret]`` first (:func:`_scrub`).
Below ``webhook.py``, ``email.py`` and ``parked.py``, which all use it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from ..reports import Doc


class Delivery(Doc, frozen=True):
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


Sleep = Callable[[float], Awaitable[Any]]


def _scrub(text: str, *secrets: str | None) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "[secret]")
    return text


def _delay(backoff_s: float, attempt: int) -> float:
    """Before try ``attempt + 1``: backoff_s, 2×, 4× … (at most 5 minutes)."""
    return min(backoff_s * 2.0 ** (attempt - 1), 300.0)
