"""What every part of one drive knows about its run, and may not change."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..binding import ServerBinding, digest
from ..plan import Plan, ToolNode


@dataclass(frozen=True)
class RunContext:
    plan: Plan
    run_id: str
    approvers: list[str]
    policy_digest: str = ""
    servers: dict[str, ServerBinding] = field(default_factory=dict)
    """The run's server bindings (empty for a run stored before bindings existed)."""
    clock: Callable[[], float] = time.time
    index: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index.update(self.plan.index())

    def policy_doc(self, step: ToolNode | None) -> dict:
        """The risk verdict an approval is fingerprinted under."""
        if step is None:
            return {"policy": self.policy_digest}
        return {"risk": step.risk, "source": step.risk_source, "policy": self.policy_digest}

    def server_digest(self, server: str) -> str:
        return digest(self.servers.get(server))
