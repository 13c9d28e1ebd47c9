"""A run's graph as an SVG drawn on the server: the nodes of ``recipe plan --format
mermaid`` (same labels, same edges), each coloured by its state in the run.

Layers are the graph's topological generations (a node sits one row below the
last of the steps it needs), nodes in a row keep the plan's order. No script and
no layout library in the browser: the page stays readable with scripts off and
under the strict content security policy.
"""

from __future__ import annotations

from typing import Any

import networkx as nx
from markupsafe import Markup, escape

from ..plan import ApprovalNode, JoinNode, LoopNode, Plan, QuestionNode, ToolNode, WriteNode
from ..text_safety import visible

NODE_W = 168
NODE_H = 52
GAP_X = 16
GAP_Y = 34
PAD = 6
CHARS = 24
"""A label line longer than this is cut (the full text is in the node's tooltip)."""


def labels(node: Any) -> tuple[list[str], str]:
    """A node's label lines and its shape, as ``cards.mermaid`` writes them."""
    if isinstance(node, ToolNode):
        return [node.id, f"{node.server}·{node.tool}", node.risk], "box"
    if isinstance(node, WriteNode):
        return [node.id, "write"], "round"
    if isinstance(node, JoinNode):
        return [node.id, f"{node.need} of {node.of}"], "diamond"
    if isinstance(node, ApprovalNode):
        return [f"⚠ approve {node.step}"], "gate"
    if isinstance(node, QuestionNode):
        return [f"ask: {node.text}"], "gate"
    if isinstance(node, LoopNode):
        return [f"for each {node.var} in {node.over_text}"], "box"
    return [str(getattr(node, "id", "?"))], "box"


def _cut(text: str) -> str:
    return text if len(text) <= CHARS else text[: CHARS - 1] + "…"


def layout(plan: Plan) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Each node's top-left corner, and the drawing's width and height."""
    g = nx.DiGraph()
    order = {n.id: i for i, n in enumerate(plan.nodes)}
    g.add_nodes_from(order)
    for n in plan.nodes:
        g.add_edges_from((need, n.id) for need in n.needs if need in order)
    rows = [sorted(gen, key=order.__getitem__) for gen in nx.topological_generations(g)]
    widest = max((len(r) for r in rows), default=1)
    width = widest * NODE_W + (widest - 1) * GAP_X + 2 * PAD
    pos: dict[str, tuple[float, float]] = {}
    for y, row in enumerate(rows):
        span = len(row) * NODE_W + (len(row) - 1) * GAP_X
        x0 = (width - span) / 2
        for x, nid in enumerate(row):
            pos[nid] = (x0 + x * (NODE_W + GAP_X), PAD + y * (NODE_H + GAP_Y))
    height = PAD * 2 + len(rows) * NODE_H + max(len(rows) - 1, 0) * GAP_Y
    return pos, width, height


def svg(plan: Plan, states: dict[str, str]) -> Markup:
    """The plan drawn as an SVG element; ``states`` maps a node id to its state in the run
    (a node with none is ``pending``: not reached). Every label is made visible and escaped."""
    pos, width, height = layout(plan)
    out = [
        f'<svg class="graph" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
        f'aria-labelledby="graph-title"><title id="graph-title">The run\'s graph: '
        f"{len(plan.nodes)} steps, each coloured by its state</title>"
    ]
    for n in plan.nodes:  # edges first, under the nodes
        x2, y2 = pos[n.id]
        for need in n.needs:
            if need not in pos:
                continue
            x1, y1 = pos[need]
            a = (x1 + NODE_W / 2, y1 + NODE_H)
            b = (x2 + NODE_W / 2, y2)
            mid = (a[1] + b[1]) / 2
            out.append(
                f'<path class="edge" d="M{a[0]:.0f},{a[1]:.0f} C{a[0]:.0f},{mid:.0f} {b[0]:.0f},{mid:.0f} {b[0]:.0f},{b[1] - 4:.0f}"/>'
                f'<path class="arrow" d="M{b[0] - 4:.0f},{b[1] - 7:.0f} L{b[0]:.0f},{b[1]:.0f} L{b[0] + 4:.0f},{b[1] - 7:.0f}"/>'
            )
    for n in plan.nodes:
        x, y = pos[n.id]
        lines, shape = labels(n)
        state = states.get(n.id, "pending")
        risky = isinstance(n, ToolNode) and n.risk != "read"
        cls = f"node {shape} s-{escape(state)}" + (" risky" if risky else "")
        tip = escape(visible(" · ".join(lines) + f" — {state}"))
        out.append(f'<g class="{cls}" data-node="{escape(n.id)}"><title>{tip}</title>')
        if shape == "diamond":
            cx, cy = x + NODE_W / 2, y + NODE_H / 2
            out.append(
                f'<polygon points="{cx:.0f},{y:.0f} {x + NODE_W:.0f},{cy:.0f} {cx:.0f},{y + NODE_H:.0f} {x:.0f},{cy:.0f}"/>'
            )
        elif shape == "gate":
            out.append(
                f'<polygon points="{x + 10:.0f},{y:.0f} {x + NODE_W:.0f},{y:.0f} {x + NODE_W - 10:.0f},{y + NODE_H:.0f} {x:.0f},{y + NODE_H:.0f}"/>'
            )
        else:
            rx = 24 if shape == "round" else 6
            out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{NODE_W}" height="{NODE_H}" rx="{rx}"/>')
        shown_lines = [*lines[:2], state] if len(lines) < 3 else [lines[0], lines[1], f"{lines[2]} · {state}"]
        step = NODE_H / (len(shown_lines) + 1)
        for i, line in enumerate(shown_lines):
            first = ' class="first"' if i == 0 else ""
            out.append(
                f'<text x="{x + NODE_W / 2:.0f}" y="{y + step * (i + 1) + 4:.0f}"{first}>{escape(visible(_cut(line)))}</text>'
            )
        out.append("</g>")
    out.append("</svg>")
    return Markup("".join(out))  # noqa: S704 - every label and state is escaped above
