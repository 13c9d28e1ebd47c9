"""A small, stable summary of the verified graph, for ``recipe plan --json``."""

from __future__ import annotations

from typing import Any

from ..plan import ApprovalNode, JoinNode, LoopNode, Plan, ToolNode
from .verify import ROOT, verify


def summary(plan: Plan) -> dict[str, Any]:
    import networkx as nx

    g = verify(plan)
    kinds: dict[str, int] = {}
    for n in plan.nodes:
        kind = type(n).__struct_config__.tag
        assert isinstance(kind, str), "every kind of node has its tag (plan.py)"
        kinds[kind] = kinds.get(kind, 0) + 1
    return {
        "nodes": len(plan.nodes),
        "edges": g.number_of_edges() - sum(1 for _ in g.successors(ROOT)),
        "kinds": kinds,
        "longest_path": max(0, nx.dag_longest_path_length(g) - 1) if len(plan.nodes) else 0,
        "approvals": {n.step: n.id for n in plan.nodes if isinstance(n, ApprovalNode)},
        "effects": [n.id for n in plan.nodes if isinstance(n, ToolNode) and n.effectful],
        "without_asking": [n.id for n in plan.nodes if isinstance(n, ToolNode) and n.without_asking],
        "joins": {n.id: {"need": n.need, "of": n.of} for n in plan.nodes if isinstance(n, JoinNode)},
        "loops": {
            n.id: {"var": n.var, "over": n.over_text, "body": list(n.body), "max_items": n.max_items}
            for n in plan.nodes
            if isinstance(n, LoopNode)
        },
        "verified": True,
    }
