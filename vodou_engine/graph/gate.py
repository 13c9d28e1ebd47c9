"""Risk for every tool, and an approval node before every effect.

This is where the gate becomes structural: an effectful step's only need is
its own approval node, so the executor cannot reach the step without passing
the approval. An ``ask me`` question that is the sole need of exactly one
effect becomes that effect's approval (one question, not two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import msgspec

from ..errors import RecipeError
from ..plan import ApprovalNode, JoinNode, LoopNode, Node, QuestionNode, Risk, ToolNode, ToolRef, Where
from ..policy import Hints, Policy

ErrorAt = Callable[[str, "Where | None", str], RecipeError]


def assess_tools(
    nodes: list[Node], policy: Policy, hints: Mapping[str, Hints | None] | None, error_at: ErrorAt
) -> list[Node]:
    """Give every tool call its risk; refuse effectful previews/checks and unsafe opt-outs."""
    hints = hints or {}
    loop_of = {m: n for n in nodes if isinstance(n, LoopNode) for m in n.body}
    verdicts: dict[
        tuple[str, str], tuple[Risk, str]
    ] = {}  # without hints: a recipe calls the same few tools many times
    out: list[Node] = []
    for node in nodes:
        if isinstance(node, ToolNode):
            hint = hints.get(node.address) if hints else None
            if hint is None:
                verdict = verdicts.get((node.server, node.tool))
                if verdict is None:
                    verdict = verdicts[node.server, node.tool] = policy.assess(node.server, node.tool)
                risk, source = verdict
            else:
                risk, source = policy.assess(node.server, node.tool, hint)
            preview = (
                _read_only(node.preview, "preview", node, policy, hints, error_at) if node.preview is not None else None
            )
            check = _read_only(node.check, "check", node, policy, hints, error_at) if node.check is not None else None
            if node.retries and risk != "read":
                raise error_at(
                    f"`retries:` is refused for `{node.id}`: {node.address} is {risk} ({source}), and an effect is never tried again by itself",
                    node.retries_where or node.where,
                    "a retry could make it happen twice; a person reconciles an effect whose outcome is unknown",
                )
            if node.without_asking and risk == "critical" and not policy.allows_without_asking(node.server, node.tool):
                raise error_at(
                    f"`without asking` is refused for `{node.id}`: {node.address} is critical ({source})",
                    node.where,
                    f'only the policy file can allow it: [tools."{node.address}"] allow_without_asking = true',
                )
            if node.without_asking and risk != "read" and node.id in loop_of:
                raise error_at(unasked_in_loop(node, risk, loop_of[node.id]), node.where, UNASKED_IN_LOOP_HINT)
            node = msgspec.structs.replace(node, risk=risk, risk_source=source, preview=preview, check=check)
        out.append(node)
    return out


UNASKED_IN_LOOP_HINT = (
    "remove `without asking`: the loop's items are then approved together, on one card that lists each "
    "item's payload; or move the step after the loop, where it can use the list of the body's outputs "
    "(`{step}`, `{step.count}`)"
)


def unasked_in_loop(node: ToolNode, risk: str, loop: LoopNode) -> str:
    """Why an effect marked ``without asking`` inside a ``for each`` is refused: a loop's effects
    are always asked, once for all the items that reach them (docs/recipe-language.md)."""
    return (
        f"`{node.id}` ({node.address}, {risk}) runs without asking and is inside `for each {loop.var}` "
        f"(line {loop.where.line if loop.where else '?'}): an effect in a loop is always asked about, "
        "once for all its items, so `without asking` cannot be used there"
    )


def _read_only(
    ref: ToolRef | None,
    what: str,
    node: ToolNode,
    policy: Policy,
    hints: Mapping[str, Hints | None],
    error_at: ErrorAt,
) -> ToolRef | None:
    if ref is None:
        return None
    risk, source = policy.assess(ref.server, ref.tool, hints.get(ref.address))
    if risk != "read":
        raise error_at(
            f"`{what}:` must be a read-only tool, but {ref.address} is {risk} ({source})",
            ref.where,
            f"a {what} runs before approval, so it may not change anything; name a read tool (list/get/preview ...)",
        )
    return msgspec.structs.replace(ref, risk=risk, risk_source=source)


def insert_approvals(nodes: list[Node]) -> list[Node]:
    """Put an approval node right before each effectful step that asks."""
    by_id = {n.id: n for n in nodes}
    users: dict[str, int] = {}
    for n in nodes:
        for need in n.needs:
            users[need] = users.get(need, 0) + 1
    converted: dict[str, ApprovalNode] = {}
    for n in nodes:
        if isinstance(n, ToolNode) and n.effectful and not n.without_asking and len(n.needs) == 1:
            q = by_id.get(n.needs[0])
            if isinstance(q, QuestionNode) and users.get(q.id) == 1:
                converted[q.id] = ApprovalNode(
                    id=f"approve:{n.id}", step=n.id, needs=list(q.needs), question=q.text, where=q.where
                )
    out: list[Node] = []
    gate_of: dict[str, str] = {}  # effect step -> its approval node
    for n in nodes:
        if n.id in converted:
            continue  # re-emitted right before its step below
        if isinstance(n, ToolNode) and n.effectful and not n.without_asking:
            if len(n.needs) == 1 and n.needs[0] in converted:
                gate = converted[n.needs[0]]
            else:
                gate = ApprovalNode(id=f"approve:{n.id}", step=n.id, needs=list(n.needs), where=n.where)
            out.append(gate)
            gate_of[n.id] = gate.id
            n = msgspec.structs.replace(n, needs=[gate.id])
        out.append(n)
    if not gate_of:
        return out
    # A join's items list every node inside them, so a quorum can drop an item whole:
    # an approval belongs to the item of the step it guards (replacing the question it
    # was made from), so a dropped branch's question is withdrawn with it.
    question_of = {q: a.id for q, a in converted.items()}
    for i, n in enumerate(out):
        if isinstance(n, LoopNode):
            # The approval is in the loop's body with its step: each item's copy of the
            # effect passes its own copy of the gate (one card for all, at run time).
            body: list[str] = []
            for m in n.body:
                if m in question_of:
                    continue
                if m in gate_of:
                    body.append(gate_of[m])
                body.append(m)
            exit_ = question_of.get(n.exit, n.exit)
            if body != n.body or exit_ != n.exit:
                out[i] = msgspec.structs.replace(n, body=body, exit=exit_)
        elif isinstance(n, JoinNode):
            members: list[list[str]] = []
            for item in n.members:
                new_item: list[str] = []
                for m in item:
                    if m in question_of:
                        continue
                    if m in gate_of:
                        new_item.append(gate_of[m])
                    new_item.append(m)
                members.append(new_item)
            if members != n.members:
                out[i] = msgspec.structs.replace(n, members=members)
    return out
