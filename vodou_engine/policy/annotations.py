"""A server's MCP annotations (``readOnlyHint``, ``destructiveHint``) and what they may do to a risk.

2. For a server the policy file marks ``trusted``, its annotations decide
   (``trusted_verdict``).

Any other server's annotations can only raise the verdict of the name rule, never
lower it (``raised``): a server saying "read-only" about ``post_message`` is
ignored, one saying "destructive" about ``get_thing`` is believed. An unset hint
is no evidence either way (the name rule already fails closed).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ..plan import Risk
from .names import verb_risk


class Hints(msgspec.Struct, frozen=True):
    """MCP tool annotations as the server gave them (None: not set)."""

    read_only: bool | None = None
    destructive: bool | None = None


def hints_from(annotations: Any) -> Hints | None:
    """Turn whatever the hub reports (an object with read_only/destructive) into Hints."""
    if annotations is None:
        return None
    ro = getattr(annotations, "read_only", None)
    de = getattr(annotations, "destructive", None)
    if ro is None and de is None:
        return None
    return Hints(ro, de)


def trusted_verdict(hints: Hints, tool: str) -> tuple[Risk, str] | None:
    """The risk a trusted server's annotations give a tool, or None when they leave it to the name.

    ``readOnlyHint=false`` alone does not lower a name that reads as ``critical``: only
    ``destructiveHint=false`` with it says the tool is not destructive.
    """
    if hints.destructive and hints.read_only is not True:
        return "critical", "destructiveHint (trusted server)"
    if hints.read_only is True:
        return "read", "readOnlyHint (trusted server)"
    if hints.read_only is False and (hints.destructive is False or verb_risk(tool)[0] != "critical"):
        return "write", "readOnlyHint=false (trusted server)"
    return None


def raised(risk: Risk, source: str, hints: Hints | None) -> tuple[Risk, str]:
    """The name rule's verdict, raised by any server's annotations where they say more, never lowered."""
    if hints is not None:
        if hints.destructive is True and hints.read_only is not True and risk != "critical":
            return "critical", "destructiveHint raised it"
        if hints.read_only is False and risk == "read":
            return "write", "readOnlyHint=false raised it"
    return risk, source
