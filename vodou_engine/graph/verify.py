"""The verified graph: a networkx DiGraph that every loaded plan must pass.

Checks, in order: every value within the language's bounds (``bounds.py``:
expiries, timeouts, retries, names and ids, as the compiler would have
written them); ids unique and needs known; acyclic; joins shaped like
their quorum; every effectful node dominated by its own approval node (from
a virtual root, so "dominated" means every path from the start passes the
approval); and, given a policy, no tool claiming a lower risk than the
policy allows (so editing ``"risk": "write"`` to ``"read"`` cannot drop a gate).

The compiler's plans settle most of this by their shape (needs listed
before use, each effect's only need its gate), which is checked in linear
time; the graph is built, and networkx consulted, only for what the shape
leaves open. ``check`` is for a runtime that only needs the verdict: on a
compiled plan it never imports networkx, which costs a quarter of a second,
on a path (``recipe approve``) where every tenth of a second shows; and
building a networkx graph of a 10,000-step plan takes longer than all the
checks together, so the compiler only checks too.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING

from ..bounds import check_plan
from ..errors import PlanError, UnguardedEffectError
from ..plan import FORMAT_LOOPS, ApprovalNode, JoinNode, LoopNode, Node, Plan, Risk, ToolNode
from ..policy import Policy, at_least

if TYPE_CHECKING:
    import networkx as nx

ROOT = "⊤"


def _err(
    cls: type[PlanError], message: str, node: Node | None = None, hint: str | None = None, path: str | None = None
) -> PlanError:
    where = node.where if node is not None else None
    return cls(
        message, path=path, line=where.line if where else None, column=where.column if where else None, hint=hint
    )


def _index(plan: Plan, path: str | None) -> dict[str, object]:
    index: dict[str, object] = {}
    for node in plan.nodes:
        if node.id in index or node.id == ROOT:
            raise _err(PlanError, f"node id `{node.id}` appears twice", node, "each node id is unique", path)
        index[node.id] = node
    for node in plan.nodes:
        for need in node.needs:
            if need not in index:
                raise _err(
                    PlanError,
                    f"`{node.id}` needs `{need}`, which is not in the plan",
                    node,
                    "recompile the recipe",
                    path,
                )
    return index


def _graph(plan: Plan, index: dict[str, object]) -> nx.DiGraph:
    import networkx as nx

    g = nx.DiGraph()
    g.add_node(ROOT)
    g.add_nodes_from(index)
    g.add_edges_from((ROOT, node.id) for node in plan.nodes if not node.needs)
    g.add_edges_from((need, node.id) for node in plan.nodes for need in node.needs)
    g.graph["index"] = index
    return g


def _check_loops(loops: list[LoopNode], plan: Plan, index: dict[str, object], path: str | None) -> dict[str, str]:
    """A loop's body is a graph of its own, run once per item: its nodes need only each other
    (the entry ones nothing), nothing outside needs them (what follows needs the loop), and
    each node belongs to one body. Returns node -> the loop whose body holds it."""
    body_of: dict[str, str] = {}
    for loop in loops:
        for member in loop.body:
            if member not in index or member == loop.id:
                raise _err(
                    PlanError,
                    f"loop `{loop.id}` lists `{member}`, which is not in its body",
                    loop,
                    "recompile the recipe",
                    path,
                )
            if member in body_of:
                raise _err(
                    PlanError,
                    f"`{member}` is in the bodies of two loops (`{body_of[member]}`, `{loop.id}`)",
                    loop,
                    "recompile the recipe",
                    path,
                )
            body_of[member] = loop.id
    # No loop inside its own body (a nested loop's body is its own).
    for loop in loops:
        seen = {loop.id}
        up = body_of.get(loop.id)
        while up is not None:
            if up in seen:
                raise _err(PlanError, f"loop `{loop.id}` is inside itself", loop, "recompile the recipe", path)
            seen.add(up)
            up = body_of.get(up)
    for node in plan.nodes:
        mine = body_of.get(node.id)
        for need in node.needs:
            if body_of.get(need) != mine:
                raise _err(
                    PlanError,
                    f"`{node.id}` needs `{need}` across the edge of a loop's body",
                    node,
                    "recompile the recipe: what follows a loop needs the loop, and a body's nodes need only each other",
                    path,
                )
        if isinstance(node, JoinNode):
            for item in node.members:
                _check_join_item(node, item, mine, body_of, index, path)
    return body_of


def _check_join_item(
    join: JoinNode,
    item: list[str],
    mine: str | None,
    body_of: dict[str, str],
    index: dict[str, object],
    path: str | None,
) -> None:
    """A join's item lists every node inside it: nodes of the join's own body (loop's body, or
    none), and a loop among them brings its whole body (nested loops' too), so a quorum that
    drops the loop drops its steps with it. Nothing else may be listed."""
    inside = set(item)
    for member in item:
        up = body_of.get(member)
        if up != mine and (up is None or up not in inside):
            raise _err(
                PlanError,
                f"join `{join.id}` lists `{member}`, which is not in the same loop body",
                join,
                "recompile the recipe",
                path,
            )
        loop = index.get(member)
        if isinstance(loop, LoopNode):
            for inner in loop.body:
                if inner not in inside:
                    raise _err(
                        PlanError,
                        f"join `{join.id}` lists loop `{member}` in an item without `{inner}` of its body",
                        join,
                        "recompile the recipe",
                        path,
                    )


def build_graph(plan: Plan, *, path: str | None = None) -> nx.DiGraph:
    return _graph(plan, _index(plan, path))


def check(plan: Plan, policy: Policy | None = None, *, path: str | None = None) -> None:
    """Every check of :func:`verify`, building the graph only if the plan's shape does not settle them."""
    check_plan(plan, path=path)
    index = _index(plan, path)
    _check(plan, index, cache(lambda: _graph(plan, index)), policy, path)


def verify(plan: Plan, policy: Policy | None = None, *, path: str | None = None) -> nx.DiGraph:
    """Build and check the graph; raise PlanError naming what is wrong."""
    check_plan(plan, path=path)
    index = _index(plan, path)
    g = _graph(plan, index)
    _check(plan, index, lambda: g, policy, path)
    return g


def _check(
    plan: Plan, index: dict[str, object], graph: Callable[[], nx.DiGraph], policy: Policy | None, path: str | None
) -> None:
    # Acyclic: the compiler emits nodes in an order where needs come first;
    # checking that is linear. Only a hand-made order needs the full search.
    seen: set[str] = set()
    ordered = True
    joins: list[JoinNode] = []
    approvals: list[ApprovalNode] = []
    tools: list[ToolNode] = []
    loops: list[LoopNode] = []
    for node in plan.nodes:
        if ordered and not seen.issuperset(node.needs):
            ordered = False
        seen.add(node.id)
        # sorted by kind once, for the checks below (each still in plan order)
        if isinstance(node, ToolNode):
            tools.append(node)
        elif isinstance(node, ApprovalNode):
            approvals.append(node)
        elif isinstance(node, JoinNode):
            joins.append(node)
        elif isinstance(node, LoopNode):
            loops.append(node)
    if loops and plan.format != FORMAT_LOOPS:
        raise _err(
            PlanError,
            f"a plan with a loop is format {FORMAT_LOOPS!r}, but this one says {plan.format!r}",
            loops[0],
            "recompile the recipe",
            path,
        )
    body_of = _check_loops(loops, plan, index, path) if loops else {}
    if not ordered:
        import networkx as nx

        if not nx.is_directed_acyclic_graph(graph()):
            cycle = " -> ".join(u for u, _ in nx.find_cycle(graph()))
            raise PlanError(f"the plan has a cycle: {cycle}", path=path, hint="needs must point to earlier nodes only")
    for node in joins:
        if len(node.needs) != node.of or not 1 <= node.need <= node.of:
            raise _err(
                PlanError,
                f"join `{node.id}` needs {node.need} of {node.of} but has {len(node.needs)} items",
                node,
                "a join waits for K of its N items, 1 <= K <= N",
                path,
            )
        if len(node.members) != node.of:
            raise _err(
                PlanError,
                f"join `{node.id}` lists members for {len(node.members)} of {node.of} items",
                node,
                "recompile the recipe",
                path,
            )
        for item, exit_node in zip(node.members, node.needs, strict=True):  # both have `of` items, checked above
            for member in item:
                if member not in index:
                    raise _err(
                        PlanError,
                        f"join `{node.id}` lists `{member}` as a member, which is not in the plan",
                        node,
                        "recompile the recipe",
                        path,
                    )
            if exit_node not in item:
                raise _err(
                    PlanError,
                    f"join `{node.id}` waits for `{exit_node}`, which is not among that item's members",
                    node,
                    "recompile the recipe",
                    path,
                )
    gates: dict[str, list[ApprovalNode]] = {}
    for node in approvals:
        target = index.get(node.step)
        if not isinstance(target, ToolNode):
            raise _err(
                PlanError,
                f"approval `{node.id}` guards `{node.step}`, which is not a tool step",
                node,
                "recompile the recipe",
                path,
            )
        gates.setdefault(node.step, []).append(node)
    # A quorum drops an item whole: an approval must be dropped with the step it guards,
    # or a question could stay open (and be approved) for a step that will never run.
    for join in joins:
        for item in join.members:
            inside = set(item)
            for member in item:
                for gate in gates.get(member, ()):
                    if gate.id not in inside:
                        raise _err(
                            PlanError,
                            f"join `{join.id}` lists step `{member}` in an item without its approval `{gate.id}`",
                            join,
                            "recompile the recipe",
                            path,
                        )
    idom: dict[str, str] | None = None
    for node in tools:
        if not node.effectful or node.without_asking:
            continue
        mine = gates.get(node.id, [])
        if len(mine) != 1:
            raise _err(
                UnguardedEffectError,
                f"step `{node.id}` ({node.address}, {node.risk}) has {'no' if not mine else len(mine)} approval node"
                + ("" if not mine else "s")
                + "; it would run without asking",
                node,
                "recompile the recipe: the compiler puts one approval before every effect",
                path,
            )
        gate_id = mine[0].id
        if body_of.get(gate_id) != body_of.get(node.id):
            raise _err(
                UnguardedEffectError,
                f"step `{node.id}` ({node.address}) is in a loop's body but its approval `{gate_id}` is not in the same one",
                node,
                "recompile the recipe: every item's effect passes the batch approval of its own loop",
                path,
            )
        if node.needs == [gate_id]:
            continue  # its only way in is the gate: dominated by definition
        if idom is None:
            import networkx as nx

            idom = nx.immediate_dominators(graph(), ROOT)
        dom = node.id
        while dom != ROOT and dom != gate_id:
            dom = idom[dom]
        if dom != gate_id:
            raise _err(
                UnguardedEffectError,
                f"step `{node.id}` ({node.address}) can be reached without passing its approval `{gate_id}`",
                node,
                "recompile the recipe: an effect's only way in is through its own approval",
                path,
            )
    if policy is not None:
        floors: dict[tuple[str, str], Risk] = {}  # a plan calls the same few tools many times

        def floor_of(server: str, tool: str) -> Risk:
            floor = floors.get((server, tool))
            if floor is None:
                if "." in server:  # `a.b.c` would name server a's tool b.c in the policy file too
                    raise PlanError(
                        f"server name {server!r} has a `.`, so the policy's key for its tool `{server}.{tool}` could be read two ways",
                        path=path,
                        hint="recompile the recipe; a recipe cannot address such a server",
                    )
                floor = floors[server, tool] = policy.floor(server, tool)
            return floor

        for node in tools:
            floor = floor_of(node.server, node.tool)
            if not at_least(node.risk, floor):
                raise _err(
                    UnguardedEffectError,
                    f"step `{node.id}` claims risk {node.risk}, but {node.address} is at least {floor} under the current policy",
                    node,
                    "recompile the recipe; risk is decided by the compiler, not by editing actions.json",
                    path,
                )
            for ref, what in ((node.preview, "preview"), (node.check, "check")):
                if ref is not None and floor_of(ref.server, ref.tool) != "read":
                    raise _err(
                        UnguardedEffectError,
                        f"the {what} of `{node.id}` ({ref.address}) is not a read-only tool under the current policy",
                        node,
                        f"a {what} runs before approval; recompile the recipe",
                        path,
                    )
            if node.retries and node.effectful:
                raise _err(
                    UnguardedEffectError,
                    f"step `{node.id}` asks for retries, but {node.address} is an effect: it is never tried again by itself",
                    node,
                    "recompile the recipe",
                    path,
                )
            if (
                node.without_asking
                and node.risk == "critical"
                and not policy.allows_without_asking(node.server, node.tool)
            ):
                raise _err(
                    UnguardedEffectError,
                    f"step `{node.id}` runs a critical tool without asking, which the policy does not allow",
                    node,
                    f'the policy file must say [tools."{node.address}"] allow_without_asking = true',
                    path,
                )
