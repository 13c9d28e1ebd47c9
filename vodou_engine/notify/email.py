"""Email: one message per approver, sent over SMTP with retries.

Each approver with an address in ``[email.approvers]`` gets a plain-text
message with the summary, the card and the link to the run page. All messages
of one parked run go over one SMTP connection per try, on a worker thread
(stdlib ``smtplib``), so the service's trio thread never blocks; a dropped
connection or a 4xx answer is tried again, a 5xx answer is not.
"""

from __future__ import annotations

import logging
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formataddr, formatdate, make_msgid, parseaddr

import trio

from ..reports import PendingApproval, RunReport
from .config import Email
from .delivery import Delivery, Sleep, _delay, _scrub
from .text import _card, _one_line, summary

logger = logging.getLogger("vodou_engine.notify")


def email_message(
    config: Email, report: RunReport, p: PendingApproval, approver: str, address: str, run_url: str, now: float
) -> EmailMessage:
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


async def _emails(
    config: Email, report: RunReport, mail: list[tuple[int, EmailMessage, PendingApproval, str]], sleep: Sleep
) -> list[Delivery]:
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
        for i, result in zip(todo, got, strict=False):
            outcome[i] = result
            tries[i] = attempt
        if attempt < config.tries and any(outcome[i][0] == "transient" for i in todo):
            await sleep(_delay(config.backoff_s, attempt))
    out = []
    for (_, _, p, target), (state, error), n in zip(mail, outcome, tries, strict=True):
        ok = state == "sent"
        d = Delivery(
            kind="email", target=target, run=report.run, step=p.step, approval=p.approval, status="sent" if ok else "failed", tries=n,
            error=None if ok else _scrub(error or "not sent", password),
        )  # fmt: skip
        if ok:
            logger.info("run %s step %s: email to %s sent (try %d)", report.run, p.step, target, n)
        else:
            logger.warning(
                "run %s step %s: email to %s not sent after %d tr%s: %s",
                report.run,
                p.step,
                target,
                n,
                "y" if n == 1 else "ies",
                d.error,
            )
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
    if isinstance(
        exc, (smtplib.SMTPException, ssl.SSLCertVerificationError)
    ):  # no STARTTLS, no AUTH, a bad certificate: trying again changes nothing
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
                code, said = next(iter(exc.recipients.values()), (550, b"refused"))
                text = said.decode("utf-8", "replace") if isinstance(said, bytes) else str(said)
                out.append(
                    (
                        "transient" if 400 <= code < 500 else "failed",
                        f"the server refused the recipient: {code} {_one_line(text)}",
                    )
                )
            except smtplib.SMTPResponseException as exc:  # this message refused; the connection goes on
                out.append(_smtp_error(exc))
            except Exception as exc:  # noqa: BLE001 - the connection is gone: this and the rest are tried again
                out.append(_smtp_error(exc))
                break
            else:
                out.append(
                    ("sent", None) if not refused else ("failed", f"the server refused the recipient: {refused}")
                )
    except Exception as exc:  # noqa: BLE001 - a failure before the first message: all of them share it
        out.extend([_smtp_error(exc)] * (len(messages) - len(out)))
    finally:
        try:
            smtp.quit()
        except Exception:  # noqa: BLE001
            smtp.close()
    if len(out) < len(messages):  # the connection dropped mid-way: the rest are tried again
        out.extend([("transient", "the connection closed before this message was sent")] * (len(messages) - len(out)))
    return out
