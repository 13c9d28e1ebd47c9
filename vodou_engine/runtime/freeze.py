"""Frozen payloads: the fingerprint an approval names, and the idempotency key.

The fingerprint covers the canonical payload, the tool address, the node,
the run, the policy verdict that applied and the binding of the server that
will be called (``binding.py``), so an approval can never be reused for a
different call, step, run, risk judgement or server. It also covers the rest
of what the card shows (``card``: who may decide, the preview's digest, the
check's arguments, the server file's name), so an edit of anything a person
reads, or of who may decide, makes the question one that no longer gives its
fingerprint.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from ..plan import canonical_bytes

IDEMPOTENCY_FIELDS = ("idempotency_key", "idempotencyKey")
"""Input-schema property names that receive the key (docs/safety.md)."""


def key_field(schema: Any) -> str | None:
    """The input-schema property that receives the run's idempotency key, or None: the first of
    IDEMPOTENCY_FIELDS among the schema's properties."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping):
        return None
    return next((name for name in IDEMPOTENCY_FIELDS if name in properties), None)


def payload_fingerprint(
    *,
    run_id: str,
    node_id: str,
    address: str,
    payload: Any,
    policy: Any,
    observed: Any = None,
    server: str = "",
    card: dict[str, Any] | None = None,
) -> str:
    """``observed`` is the ``check:`` read taken at question time: the world the person approved.
    ``server`` is the digest of the called server's binding (empty for runs stored before bindings).
    ``card`` is :func:`card_doc`: the rest of what the card shows (None for questions stored
    before it was covered, whose fingerprints stay what they were)."""
    doc = {"run": run_id, "node": node_id, "tool": address, "payload": payload, "policy": policy}
    if observed is not None:
        doc["observed"] = observed
    if server:
        doc["server"] = server
    if card is not None:
        doc["card"] = card
    return "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()


def card_doc(
    *, approvers: list[str], preview: Any = None, check_args: Any = None, has_check: bool = False, source: str = ""
) -> dict[str, Any]:
    """What the card, the run page and a notification show of a question besides its payload,
    check read, risk verdict and binding digest: who may decide (the store decides by it), the
    preview's digest, the arguments the check is read again with before the effect, and the
    file the server's binding was read from. A key is left out when the question has none of
    it. No times: the same question asked again keeps its fingerprint (and idempotency key);
    the expiry is checked against the plan instead (:func:`expiry_s`)."""
    doc: dict[str, Any] = {"approvers": list(approvers)}
    if preview is not None:
        doc["preview"] = "sha256:" + hashlib.sha256(canonical_bytes(preview)).hexdigest()
    if has_check:
        doc["check_args"] = check_args
    if source:
        doc["source"] = source
    return doc


def expiry_s(options: Any, step: Any) -> int:
    """How long a question stays open: the step's ``expires:``, else the recipe's ``approval
    expires:`` (a question with no effect of its own: the recipe's). A stored question's
    expiry is its asked time plus this, or the row was edited."""
    return (step.expires_s if step is not None else 0) or options.approval_expires_s


def gives_its_fingerprint(approval: Any, *, node_id: str, address: str, payload: Any, server: Any) -> bool:
    """Whether the fingerprint recomputed over what a question's row stores (its payload given
    decoded) is the one it was asked with; for a question stored before ``card`` was covered,
    as it was taken then. Raises ``msgspec.DecodeError``, ``KeyError`` or ``TypeError`` on a
    row that does not decode. ``server``: the stored binding of the server the step calls, or None."""
    import msgspec

    from ..binding import digest

    decode = msgspec.json.decode
    policy = decode(approval.policy_json) if approval.policy_json else None
    check = decode(approval.check_json) if approval.check_json else None
    common = {
        "run_id": approval.run_id, "node_id": node_id, "address": address, "payload": payload, "policy": policy,
        "observed": None if check is None else check["result"], "server": digest(server),
    }  # fmt: skip
    card = card_doc(
        approvers=decode(approval.approvers_json, type=list[str]) if approval.approvers_json else [],
        preview=decode(approval.preview_json) if approval.preview_json else None,
        check_args=None if check is None else check["args"], has_check=check is not None,
        source=server.source if server is not None else "",
    )  # fmt: skip
    if approval.fingerprint == payload_fingerprint(**common, card=card):
        return True
    return bool(approval.fingerprint == payload_fingerprint(**common))  # asked before the card was covered


def idempotency_key(run_id: str, step: str, fingerprint: str) -> str:
    return "vodou-" + hashlib.sha256(f"{run_id}\x00{step}\x00{fingerprint}".encode()).hexdigest()[:32]
