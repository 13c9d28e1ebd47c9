"""What every part of one drive knows about its run, and may not change."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..binding import ServerBinding, digest
from ..plan import ApprovalNode, Node, Plan, ToolNode

Render = Callable[[dict[str, Any]], Any]
"""How a step's argument templates become values (``Scheduler.render``): what its gates and effects are handed."""


@dataclass(frozen=True)
class RunContext:
    plan: Plan
    run_id: str
    approvers: list[str]
    policy_digest: str = ""
    servers: dict[str, ServerBinding] = field(default_factory=dict)
    """The run's server bindings (empty for a run stored before bindings existed)."""
    clock: Callable[[], float] = time.time
    index: dict[str, Node] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index.update((n.id, n) for n in self.plan.nodes)  # no second dict of every node on the way

    def tool(self, nid: str) -> ToolNode:
        """The step an approval guards (the verified plan makes it a tool step)."""
        node = self.index[nid]
        if not isinstance(node, ToolNode):
            raise TypeError(f"`{nid}` is not a tool step")
        return node

    def approval_of(self, step: ToolNode) -> ApprovalNode:
        """The approval an asked effect waits on: its only need (``graph/gate.py``; verified on every load)."""
        node = self.index[step.needs[0]]
        if not isinstance(node, ApprovalNode):
            raise TypeError(f"`{step.id}` does not follow its approval")
        return node

    def policy_doc(self, step: ToolNode | None) -> dict[str, Any]:
        """The risk verdict an approval is fingerprinted under."""
        if step is None:
            return {"policy": self.policy_digest}
        return {"risk": step.risk, "source": step.risk_source, "policy": self.policy_digest}

    def server_digest(self, server: str) -> str:
        return digest(self.servers.get(server))
