"""Who may act: approvers and their secrets (only a hash is kept), proving a name with
one, and the record of a claim to act under a name made without proof.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import msgspec

from ..errors import RefusedError, UsageError
from .core import RunsCore


class PeopleMixin(RunsCore):
    """``add_approver``, ``remove_approver``, ``approvers``, ``proves``, ``refuse_identity``."""

    def add_approver(self, name: str, *, by: str) -> str:
        """Give ``name`` a secret to act under that name; returns it (only its hash is kept).
        Giving a name a new secret revokes the old one. ``agent:...`` names are the agents'
        (runs an agent starts are started by ``agent:NAME``), never a person's."""
        if name.startswith("agent:"):
            raise UsageError(
                f"{name!r}: names starting with `agent:` are the agents' (`recipe agent add`), and an agent never decides; nothing was changed",
                hint="give the person their own name",
                name=name,
            )
        token = "vodou_" + secrets.token_urlsafe(24)
        self.store().set_approver(name, hashlib.sha256(token.encode()).hexdigest(), by=by)
        return token

    def ensure_approver(self, name: str, *, by: str) -> bool:
        """Make ``name`` an approver unless it is one (an existing secret is left alone), with a
        secret nobody is shown; True when this call added it. Two processes doing this at once
        (two ``recipe serve`` starting on one store) both succeed."""
        if name.startswith("agent:"):
            raise UsageError(f"{name!r}: names starting with `agent:` are the agents'; nothing was changed", name=name)
        token = "vodou_" + secrets.token_urlsafe(24)
        return self.store().add_approver_if_missing(name, hashlib.sha256(token.encode()).hexdigest(), by=by)

    def remove_approver(self, name: str, *, by: str) -> bool:
        return self.store(create=False).remove_approver(name, by=by)

    def approvers(self) -> list[str]:
        return [a.name for a in self.store(create=False, readonly=True).approvers_list()]

    def proves(self, name: str, token: str | None) -> bool:
        """Whether ``token`` is the secret of the approver ``name``."""
        if not token:
            return False
        rec = self.store(create=False).get_approver(name)
        return rec is not None and hmac.compare_digest(rec.token_sha256, hashlib.sha256(token.encode()).hexdigest())

    def refuse_identity(
        self, claimed: str, *, by: str, command: str, run_id: str | None = None, via: str = "--as", create: bool = False
    ) -> None:
        """Record an attempt to act under a name without proof of it (``via``: how it was
        claimed, ``--as`` or an environment variable such as ``$LOGNAME``)."""
        try:
            store = self.store(create=create)
        except Exception:  # noqa: BLE001 - no store to write to: the refusal still stands
            return
        data = {"claimed": claimed, "command": command, "via": via}
        store.audit("identity.refused", actor=by, run_id=run_id, data=data)
        if run_id is not None:
            try:
                store.append_event(run_id, "identity.refused", actor=by, data_json=msgspec.json.encode(data).decode())
            except RefusedError:
                pass  # no such run: the store-wide log has it
