"""Which servers a plan calls: the ones a run starts, and the ones a stored run still needs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from vodou_engine.plan import Plan, ToolNode
from vodou_engine.policy import BUILTIN_SERVER
from vodou_engine.states import TERMINAL_NODE_STATES

if TYPE_CHECKING:
    from vodou_engine.store.records import NodeRecord

__all__ = ["servers_needed", "servers_to_finish"]


def servers_needed(plan: Plan, done: Callable[[str], bool] = lambda _: False) -> list[str]:
    """The servers a plan's tool steps (and their previews and checks) call, skipping the ``done`` ones."""
    names = []
    for n in plan.nodes:
        if isinstance(n, ToolNode) and not done(n.id):
            for srv in (n.server, n.preview and n.preview.server, n.check and n.check.server):
                if srv and srv != BUILTIN_SERVER:
                    names.append(srv)
    return list(dict.fromkeys(names))


def servers_to_finish(plan: Plan, nodes: Mapping[str, NodeRecord]) -> list[str]:
    """The servers a stored run still needs: ``nodes`` are its stored node records by id.
    A step dropped by a quorum, like one that succeeded, will not run again."""
    done = {nid for nid, n in nodes.items() if n.state in TERMINAL_NODE_STATES}
    return servers_needed(plan, done.__contains__)
