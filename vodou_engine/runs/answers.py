"""A person's answer to a server's question (MCP elicitation): its shape, and the schema it must fit.

The server asked with a JSON Schema (MCP form mode: an object of flat fields); the answer is
checked against it with ``jsonschema`` before anything is recorded, and refused in the
schema's own words. ``decline`` and ``cancel`` carry no content. The answer is stored with
the decision (the approval's ``reason``, as JSON) so the audit log holds what was answered,
by whom, and when (docs/safety.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema
import msgspec

from ..cards import ELICITATION, is_elicitation
from ..errors import UsageError
from ..tools.hooks import ACTIONS

__all__ = ["answer_doc", "check_answer_fits"]


def answer_doc(action: str, content: Mapping[str, Any] | None) -> dict[str, Any]:
    """The answer as stored: ``{"action", "content"}``; a bad action or stray content is refused."""
    if action not in ACTIONS:
        raise UsageError(f"an answer is one of {', '.join(ACTIONS)}, not {action!r}; nothing was changed")
    if action != "accept" and content:
        raise UsageError(f"a {action} carries no content; nothing was changed", hint="leave the fields out")
    if action == "accept" and content is None:
        raise UsageError("accepting a server's question needs its fields; nothing was changed")
    return {"action": action, "content": dict(content) if action == "accept" and content is not None else None}


def check_answer_fits(run_id: str, approval: Any, answer: dict[str, Any] | None) -> None:
    """A server's question is answered, not approved; an approval is approved, not answered;
    an accepted answer fits the schema the server asked with."""
    try:
        payload = msgspec.json.decode(approval.payload_json)
    except msgspec.DecodeError:
        return  # refused as tampered by the card check that follows
    asks = is_elicitation(payload)
    if asks and answer is None:
        raise UsageError(
            f"`{approval.step}` waits for an answer to its server's question, not an approval; nothing was changed",
            hint=f"recipe answer {run_id} {approval.step} --fields '{{...}}' (or --decline, --cancel)",
            run=run_id,
            step=approval.step,
        )
    if not asks and answer is not None:
        raise UsageError(
            f"`{approval.step}` waits for an approval, not an answer; nothing was changed",
            hint=f"recipe approve {run_id} {approval.step} (or recipe reject)",
            run=run_id,
            step=approval.step,
        )
    if answer is None or answer["action"] != "accept":
        return
    schema = payload[ELICITATION].get("schema") or {}
    validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)  # "email", "date"...
    errors = sorted(validator.iter_errors(answer["content"]), key=lambda e: list(e.path))
    if errors:
        words = "; ".join((f"`{'.'.join(str(p) for p in e.path)}`: " if e.path else "") + e.message for e in errors[:5])
        raise UsageError(
            f"the answer does not fit the question of `{approval.step}`: {words}; nothing was changed",
            hint="answer with the fields the card lists, of the types it says",
            run=run_id,
            step=approval.step,
        )
