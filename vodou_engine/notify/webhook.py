"""Webhooks: the signature, the body, and one delivery with its retries.

A webhook is a POST of :class:`WebhookBody` as JSON, signed with the webhook's
secret (:func:`sign`: HMAC-SHA256 over the timestamp and the body; receivers
verify it as docs/notifications.md shows). It is retried on a connection error,
a timeout, 408, 429 and 5xx; the answer's body is never read. It goes out on
trio (httpx2, through anyio), so it never blocks the service's trio thread.

httpx2 is imported where a webhook is sent, not at the top: ``recipe approver
add`` reads the serve configuration through this package, and must not pay for
an HTTP client it does not use.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import uuid
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from .. import __version__
from ..reports import Doc, PendingApproval, RunReport
from .config import Webhook
from .delivery import Delivery, Sleep, _delay, _scrub
from .text import NOTE, _card, summary

logger = logging.getLogger("vodou_engine.notify")

EVENT = "approval.parked"
SIGNATURE_VERSION = "v1"


def sign(secret: str | bytes, timestamp: str, body: bytes) -> str:
    """``X-Vodou-Signature``'s value: ``v1=`` + hex HMAC-SHA256(secret, timestamp + "." + body)."""
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    digest = hmac.new(key, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"{SIGNATURE_VERSION}={digest}"


# --- the body ------------------------------------------------------------------------------
class WebhookBody(Doc, frozen=True):
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


# --- one delivery, with its retries --------------------------------------------------------
async def _webhook(
    client: Any,
    hook: Webhook,
    report: RunReport,
    p: PendingApproval,
    run_url: str,
    sleep: Sleep,
    clock: Callable[[], float],
) -> Delivery:
    import httpx2

    delivery_id = uuid.uuid4().hex
    secret = hook.secret.reveal()

    def done(
        status: Literal["sent", "failed", "skipped"],
        tries: int,
        error: str | None = None,
        http_status: int | None = None,
    ) -> Delivery:
        d = Delivery(
            kind="webhook", target=hook.name, run=report.run, step=p.step, approval=p.approval, status=status, tries=tries,
            error=_scrub(error, secret, hook.url) if error else None, http_status=http_status, delivery_id=delivery_id,
        )  # fmt: skip
        if d.ok:
            logger.info("run %s step %s: webhook %s delivered (try %d)", report.run, p.step, hook.name, tries)
        else:
            logger.warning(
                "run %s step %s: webhook %s not delivered after %d tr%s: %s",
                report.run,
                p.step,
                hook.name,
                tries,
                "y" if tries == 1 else "ies",
                d.error,
            )
        return d

    try:
        body = msgspec.json.encode(
            WebhookBody(
                event=EVENT, delivery=delivery_id, run=report.run, recipe=report.recipe, step=p.step, approval=p.approval,
                fingerprint=p.fingerprint, expires_at=p.expires_at, approvers=list(p.approvers), url=run_url, card=_card(p.card),
                text=summary(report, p, run_url, clock()),
            )
        )  # fmt: skip
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
                async with client.stream(
                    "POST", hook.url, content=body, headers=headers, timeout=hook.timeout_s
                ) as response:
                    status = (
                        response.status_code
                    )  # the answer's body is never read: a receiver cannot make us hold much
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
