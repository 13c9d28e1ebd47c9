"""What a notification says, in a webhook's body and in an email alike.

A short summary (what waits, for whom, until when, where to decide), the card
as the run page shows it, and :data:`NOTE`: a notification only points at the
run page and cannot decide anything by itself. Every name from the recipe is
shown as every other surface shows it (``text_safety``), so a notification
cannot hide a character the terminal and the inbox would show.
"""

from __future__ import annotations

import re
import time

from ..reports import PendingApproval, RunReport
from ..text_safety import quote as quoted
from ..text_safety import shown, visible

MAX_CARD_CHARS = 64 * 1024
"""A card longer than this is cut in a notification (the run page shows it whole)."""

NOTE = (
    "This notification cannot approve anything by itself: the link only opens the run page. "
    "To decide, sign in there as one of the approvers and press Approve or Reject."
)


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
    waits = "an answer to its server's question" if p.asks is not None else "an approval"
    lines = [
        f"Run {visible(report.run)} of recipe {quoted(report.recipe or '(unnamed)')} is waiting for {waits} at step {quoted(p.step)}."
    ]
    lines.append("Who may decide: " + (", ".join(visible(a) for a in p.approvers) if p.approvers else "any approver"))
    when = _when(p.expires_at, now)
    if when:
        lines.append(f"Expires: {when}")
    lines.append(f"Open the run page to decide: {run_url}")
    lines.append(NOTE)
    return "\n".join(lines)


def _one_line(text: str) -> str:
    return shown(re.sub(r"[\x00-\x1f\x7f]+", " ", text).strip())
