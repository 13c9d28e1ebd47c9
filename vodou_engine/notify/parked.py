"""Telling approvers that a run parked: every webhook and every approver, at once.

``recipe serve`` calls :func:`notify_parked` from a task of its own when a run
parks (``Service(on_parked=...)``). It sends each pending approval to every
configured webhook and emails every approver with an address, concurrently,
and returns one :class:`~.delivery.Delivery` per notification in a stable
order. Nothing here raises for a failed delivery; not even a bug may fail the
run. httpx2 is imported only when there is a webhook to send (``webhook.py``
says why).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from email.message import EmailMessage
from email.utils import parseaddr

import trio

from .. import logs
from ..reports import PendingApproval, RunReport
from .config import Email, ServeConfig, Webhook
from .delivery import Delivery, Sleep, _scrub
from .email import _emails, email_message
from .webhook import _webhook

logger = logging.getLogger("vodou_engine.notify")


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
        logger.error(
            "run %s: notifying stopped early: %s",
            report.run,
            _scrub(f"{type(exc).__name__}: {exc}", *_secrets_of(config)),
        )
    done = [results[i] for i in sorted(results)]
    for d in done:
        if d.status == "sent":
            logs.event("notification.sent", run=d.run, step=d.step, to=d.target, channel=d.kind)
    return done


def _secrets_of(config: ServeConfig) -> list[str]:
    out = [s for h in config.webhooks for s in (h.secret.reveal(), h.url)]
    if config.email is not None and config.email.password is not None:
        out.append(config.email.password.reveal())
    return out


async def _notify(
    config: ServeConfig,
    report: RunReport,
    run_url: str,
    sleep: Sleep,
    clock: Callable[[], float],
    results: dict[int, Delivery],
) -> None:
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

            async def emails(email: Email) -> None:
                for (i, *_), d in zip(mail, await _emails(email, report, mail, sleep), strict=False):
                    results[i] = d

            for i, hook, p in hooks:
                nursery.start_soon(webhook, i, hook, p)
            if mail and config.email is not None:  # there is mail only when [email] is configured
                nursery.start_soon(emails, config.email)
    finally:
        if client is not None:
            with trio.CancelScope(shield=True):
                await client.aclose()
