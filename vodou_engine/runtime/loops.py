"""``for each`` at run time: a loop's items as copies of its body, and what each copy's names mean.

The plan holds a loop's body once, as template nodes (``plan.LoopNode``). When the
loop's list is known, every item gets its own copy of every body node, the item's
index after the id (``reply[0]``; in a nested loop ``t[0][2]``), its needs renamed
the same way; the scheduler then runs the copies like any other node, so reads,
writes, joins and built-ins inside a loop behave exactly as outside it. Here: the
list and its bounds, the copies, and how a copy's references resolve (the item,
then the same item's steps, then the enclosing items', then the run's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ..compiler import template
from ..errors import RecipeError, ToolError
from ..graph.gate import UNASKED_IN_LOOP_HINT, unasked_in_loop
from ..plan import ApprovalNode, JoinNode, LoopNode, Node, Plan, ToolNode


@dataclass(slots=True)
class Scope:
    """What a copied node's names mean: its item's suffix, and every enclosing loop's variable."""

    suffix: str
    binds: dict[str, Any]


TOP = Scope("", {})


@dataclass(slots=True)
class LoopRun:
    """One loop (or one copy of a nested loop) while its items run."""

    node: LoopNode
    scope: Scope
    items: list[Scope] = field(default_factory=list)
    exits: list[str] = field(default_factory=list)
    members: list[list[str]] = field(default_factory=list)
    started: int = 0
    active: int = 0
    ok: int = 0
    bad: int = 0
    need: int = 0
    limit: int = 1
    done: bool = False
    filling: bool = False
    committed: bool = False
    """A batch question of this loop was approved: its approved items all run, so a failed
    item no longer ends the loop early (it ends when every item has)."""
    declined: set[int] = field(default_factory=set)
    """Items a person left out of an approved batch: never run, not counted."""
    entries: list[int] = field(default_factory=list)
    """Which of an item's copies (by place in the body) need nothing: the ones an item starts with."""
    resumed: bool = False
    """A drive before left states for this run: an item's copies may already have ended."""


@dataclass(slots=True)
class Batch:
    """A loop's effect asked once for all its items: the items waiting at its gate (by index:
    ``{"item", "payload", "fingerprint"}``), asked when every item has reached it or ended."""

    loop: LoopRun
    gate: str
    """The template gate (or question) it is asked for."""
    outer: str = ""
    """In a loop inside another, the outer item's suffix (``[0]``): stored under ``approve:send[0]``."""
    waiting: dict[int, dict[str, Any]] = field(default_factory=dict)
    asked: bool = False


def split_copy(index: Mapping[str, Any], nid: str) -> tuple[str, str]:
    """A copy's id as its template's id and its suffix (``send[0]`` -> ``send``, ``[0]``); an id
    of the plan as itself and no suffix. A batch question of a loop inside another is stored
    under its outer item's copy of the gate and step (``approve:send[0]``, ``send[0]``)."""
    base = nid
    while base not in index and base.endswith("]") and "[" in base:
        base = base[: base.rfind("[")]
    return (base, nid[len(base) :]) if base in index else (nid, "")


def outer_of(suffix: str) -> str:
    """A suffix without its innermost item: ``[0]`` for ``[0][2]``, empty for ``[2]``."""
    return suffix[: suffix.rfind("[")]


def batch_key(copy_id: str, suffix: str) -> str:
    """The id a loop item's gate asks its batch's question under: the template gate's, with the
    outer item's suffix in a loop inside another (``approve:send[0]`` for ``approve:send[0][2]``)."""
    return copy_id[: len(copy_id) - len(suffix)] + outer_of(suffix)


def item_of(suffix: str) -> int:
    """The index of the innermost item in a suffix: 2 for ``[0][2]``."""
    return int(suffix[suffix.rfind("[") + 1 : -1])


def templates_within(plan: Plan) -> dict[str, list[str]]:
    """Per loop id: every template node inside it, nested loops' bodies included."""
    index = plan.index()
    out: dict[str, list[str]] = {}

    def walk(loop: LoopNode) -> list[str]:
        found = out.get(loop.id)
        if found is None:
            found = []
            for m in loop.body:
                found.append(m)
                inner = index[m]
                if isinstance(inner, LoopNode):
                    found.extend(walk(inner))
            out[loop.id] = found
        return found

    for n in plan.nodes:
        if isinstance(n, LoopNode):
            walk(n)
    return out


def the_list(node: LoopNode, value: Any) -> list[Any]:
    """The items, or a ToolError saying what was found instead (the step fails, nothing runs)."""
    if not isinstance(value, list):
        kind = {dict: "an object", str: "a string", bool: "true or false", type(None): "null"}.get(
            type(value), "a number"
        )
        raise ToolError(
            f"`for each {node.var} in {node.over_text}`: {node.over_text} is {kind}, not a list; no item ran"
        )
    if len(value) > node.max_items:
        raise ToolError(
            f"`for each {node.var} in {node.over_text}`: {len(value)} items, more than the {node.max_items} "
            f"this loop allows (`max items: N`, at most 10000); no item ran"
        )
    return value


def copier(node: Node, body: set[str]) -> Callable[[str], Node]:
    """What makes template ``node``'s copy for the item with a suffix: its id and its needs
    (those inside the same body) carry the suffix; a join's members and an approval's step
    too. ``body`` is every template inside the loop, nested loops' included: a join's item
    that holds a nested loop lists that loop's steps, which the item names with its suffix. Worked out once per loop instead of once per item: a copy shares every other field
    with its template (frozen values, never changed), and a node that needs nothing (a body's
    entry) shares its empty needs too."""
    replace = msgspec.structs.replace
    base = node.id
    if isinstance(node, JoinNode):
        members = node.members

        def join_copy(suffix: str) -> Node:
            def rename(nid: str) -> str:
                return nid + suffix if nid in body else nid

            return replace(
                node,
                id=base + suffix,
                needs=[rename(x) for x in node.needs],
                members=[[rename(m) for m in item] for item in members],
            )

        return join_copy
    needs = node.needs
    pairs = [(x, x in body) for x in needs]
    step = node.step if isinstance(node, ApprovalNode) else None
    if step is not None:
        step_inside = step in body

        def approval_copy(suffix: str) -> Node:
            return replace(
                node,
                id=base + suffix,
                needs=[x + suffix if x_in else x for x, x_in in pairs],
                step=step + suffix if step_inside else step,
            )

        return approval_copy
    if not needs:
        return lambda suffix: replace(node, id=base + suffix)
    return lambda suffix: replace(node, id=base + suffix, needs=[x + suffix if x_in else x for x, x_in in pairs])


def lookup(name: str, scope: Scope, outputs: dict[str, Any]) -> tuple[bool, Any]:
    """A name as a copied node sees it: an enclosing loop's variable, else the step's value
    for the same item (``draft[2]``), the enclosing items' (``t[2]``: a nested loop's list
    for this item), then the run's (an input or a step outside every loop)."""
    if name in scope.binds:
        return True, scope.binds[name]
    suffix = scope.suffix
    while suffix:
        key = name + suffix
        if key in outputs:
            return True, outputs[key]
        suffix = suffix[: suffix.rfind("[")]
    return False, None


def missing(name: str) -> template.MissingValue:
    return template.MissingValue(f"{{{name}}} has no value")


def copies_by_template(plan: Plan, node_ids: list[str]) -> dict[str, list[str]]:
    """Stored node ids that are loop items' copies (``reply[0]``, ``t[1][0]``), per template
    id, in item order: how ``recipe show`` lists each item under its step."""
    templates = {m for n in plan.nodes if isinstance(n, LoopNode) for m in n.body}
    templates.update(t for n in plan.nodes if isinstance(n, LoopNode) for t in templates_within(plan).get(n.id, ()))
    out: dict[str, list[tuple[tuple[int, ...], str]]] = {}
    for nid in node_ids:
        cut = nid.find("[")
        if cut > 0 and nid[:cut] in templates and nid.endswith("]"):
            try:
                key = tuple(int(x) for x in nid[cut + 1 : -1].split("]["))
            except ValueError:
                continue
            out.setdefault(nid[:cut], []).append((key, nid))
    return {t: [nid for _, nid in sorted(found)] for t, found in out.items()}


def refuse_asking_in_loops(plan: Plan, path: str | None = None, text: str | None = None) -> None:
    """Before a run starts: an effect marked ``without asking`` inside a loop is refused (exit
    2), nothing run. The compiler refuses it already (``graph.gate.assess_tools``); this holds
    for a plan that did not come from it here (an actions.json), or whose tool the servers'
    own annotations make an effect where the compile without them saw a read."""
    index = plan.index()
    for loop in plan.nodes:
        if not isinstance(loop, LoopNode):
            continue
        for nid in loop.body:
            node = index[nid]
            if not (isinstance(node, ToolNode) and node.effectful and node.without_asking):
                continue
            where = node.where
            lines = text.splitlines() if text is not None and where is not None else []
            raise RecipeError(
                unasked_in_loop(node, node.risk, loop) + "; nothing was run",
                path=path,
                line=where.line if where else None,
                column=where.column if where else None,
                source_line=lines[where.line - 1] if where is not None and where.line <= len(lines) else None,
                hint=UNASKED_IN_LOOP_HINT,
            )
