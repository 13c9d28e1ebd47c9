"""Frozen payloads: the fingerprint an approval names, and the idempotency key.

The fingerprint covers the canonical payload, the tool address, the node,
the run and the policy verdict that applied, so an approval can never be
reused for a different call, step, run or risk judgement.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..plan import canonical_bytes

IDEMPOTENCY_FIELDS = ("idempotency_key", "idempotencyKey")
"""Input-schema property names that receive the key (docs/safety.md)."""


def payload_fingerprint(*, run_id: str, node_id: str, address: str, payload: Any, policy: Any, observed: Any = None) -> str:
    """``observed`` is the ``check:`` read taken at question time: the world the person approved."""
    doc = {"run": run_id, "node": node_id, "tool": address, "payload": payload, "policy": policy}
    if observed is not None:
        doc["observed"] = observed
    return "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()


def idempotency_key(run_id: str, step: str, fingerprint: str) -> str:
    return "vodou-" + hashlib.sha256(f"{run_id}\x00{step}\x00{fingerprint}".encode()).hexdigest()[:32]
