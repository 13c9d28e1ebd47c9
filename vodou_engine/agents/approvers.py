"""Who decides an agent's run: the approvers an agent's recipe is given when it names none.

Light on purpose (a regular expression and the error tree): ``identity.py`` checks the
approver names of ``recipe agent add`` with :data:`PERSON`, and the CLI loads that
module for the command.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError

PERSON = re.compile(r"[A-Za-z0-9_.@+-]+")
"""An approver's name, as the recipe language spells one (``approvers: ana, bruno``)."""


def with_approvers(text: str, plan: Any, approvers: list[str]) -> tuple[str, bool]:
    """``text`` with ``approvers: ...`` added at the end when the recipe names none.

    The run API makes whoever starts a run its approver when the recipe names no
    ``approvers:``; for an agent that would be the agent itself, which never decides.
    So an agent's recipe without that line gets the people this server runs for, as a
    header line a person can read on the card. Returns (text, whether it was added)."""
    if plan.options.approvers:
        return text, False
    bad = [a for a in approvers if not PERSON.fullmatch(a)]
    if not approvers or bad:
        raise UsageError(
            f"cannot name the approvers of an agent's run: {', '.join(map(repr, bad)) or 'none configured'} is not a usable approver name",
            hint="start the agent server with --approver NAME (letters, digits and _ . @ + -)",
        )
    body = text if text.endswith("\n") or not text else text + "\n"
    return body + "approvers: " + ", ".join(approvers) + "   # added: an agent's run is decided by a person\n", True
