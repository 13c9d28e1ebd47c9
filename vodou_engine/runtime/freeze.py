"""Frozen payloads: the fingerprint an approval names, and the idempotency key.

The fingerprint covers the canonical payload, the tool address, the node,
the run, the policy verdict that applied and the binding of the server that
will be called (``binding.py``), so an approval can never be reused for a
different call, step, run, risk judgement or server.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..plan import canonical_bytes

IDEMPOTENCY_FIELDS = ("idempotency_key", "idempotencyKey")
"""Input-schema property names that receive the key (docs/safety.md)."""


def payload_fingerprint(
    *, run_id: str, node_id: str, address: str, payload: Any, policy: Any, observed: Any = None, server: str = ""
) -> str:
    """``observed`` is the ``check:`` read taken at question time: the world the person approved.
    ``server`` is the digest of the called server's binding (empty for runs stored before bindings)."""
    doc = {"run": run_id, "node": node_id, "tool": address, "payload": payload, "policy": policy}
    if observed is not None:
        doc["observed"] = observed
    if server:
        doc["server"] = server
    return "sha256:" + hashlib.sha256(canonical_bytes(doc)).hexdigest()


def idempotency_key(run_id: str, step: str, fingerprint: str) -> str:
    return "vodou-" + hashlib.sha256(f"{run_id}\x00{step}\x00{fingerprint}".encode()).hexdigest()[:32]
