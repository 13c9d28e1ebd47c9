"""What a person reads: the plan card, the approval card, the run timeline.

The plan card mirrors the graph, not the recipe text: a ⚠ row exists exactly
when the graph has an approval node for that step, so the warning and the
gate cannot drift apart.

The approval card is rendered from the frozen payload every time it is shown,
on every surface (terminal, page, notification, agent views), and only after
the payload is checked against the fingerprint it was asked with; every value
on it goes through ``text_safety``, so nothing on it can hide and two payloads
that differ never read alike.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .errors import TamperedError
from .plan import ApprovalNode, JoinNode, LoopNode, Plan, QuestionNode, ToolNode, WriteNode
from .runtime.freeze import expiry_s, gives_its_fingerprint
from .runtime.loops import split_copy
from .text_safety import Findings, findings, json_text, shown, visible

RISK_STYLE = {"read": "green", "write": "yellow", "critical": "bold red"}


@dataclass
class ToolStatus:
    """What a live server said about a step's tool: present, or the closest name."""

    exists: bool
    note: str = ""


def groups(plan: Plan) -> tuple[dict[str, list[str]], dict[str, int]]:
    """For each node: the joins and loops that contain it, and its depth."""
    inside: dict[str, list[str]] = {}
    loop_of: dict[str, str] = {}
    for node in plan.nodes:
        if isinstance(node, JoinNode):
            for item in node.members:
                for member in item:
                    inside.setdefault(member, []).insert(0, node.id)
        elif isinstance(node, LoopNode):
            for member in node.body:
                loop_of[member] = node.id
    for nid in loop_of:
        chain: list[str] = []
        up: str | None = loop_of[nid]
        while up is not None:
            chain.insert(0, up)
            up = loop_of.get(up)
        inside[nid] = chain + inside.get(nid, [])
    return inside, {k: len(v) for k, v in inside.items()}


def loop_words(node: LoopNode) -> tuple[str, str]:
    """A loop's card row: ``for each m in unread.messages`` and what is known of it now."""
    if isinstance(node.over, list):
        n = len(node.over)
        count = f"{n} item{'s' if n != 1 else ''}"
    else:
        count = "count known at run time"
    rules = [f"({count})"]
    if node.at_most:
        rules.append(f"at most {node.at_most} at a time")
    if node.need is not None:
        rules.append(f"needs {node.need} of all; the rest are cancelled")
    elif node.need_percent is not None:
        rules.append(f"needs {node.need_percent}% of them; the rest are cancelled")
    rules.append(f"at most {node.max_items} items")
    return f"for each {node.var} in {visible(node.over_text)}", "; ".join(rules)


def plan_rows(
    plan: Plan, status: Mapping[str, ToolStatus] | None = None, writer: str = "offline writer"
) -> list[tuple]:
    """Rows of (indent, label, step, address, risk, why, gated) in execution order."""
    status = status or {}
    approvals = {n.step: n for n in plan.nodes if isinstance(n, ApprovalNode)}
    _, depth = groups(plan)
    rows: list[tuple] = []
    # a together header goes right before its first member node
    headers: dict[str, list[JoinNode]] = {}
    for node in plan.nodes:
        if isinstance(node, JoinNode) and node.members and node.members[0]:
            headers.setdefault(node.members[0][0], []).append(node)
    after_join = False
    for node in plan.nodes:
        d = depth.get(node.id, 0)
        for join in sorted(headers.get(node.id, []), key=lambda j: depth.get(j.id, 0)):
            name = f" {join.block}" if join.block else ""
            rows.append(
                (
                    depth.get(join.id, 0),
                    "together" + name,
                    "they don't need each other, so they run at the same time",
                    None,
                    None,
                    None,
                    False,
                )
            )
        if isinstance(node, LoopNode):
            label, rule = loop_words(node)
            rows.append(
                (
                    d,
                    label,
                    rule + ("; each item asks in one card for all" if _asks_in(node, approvals) else ""),
                    None,
                    None,
                    None,
                    False,
                )
            )
            continue
        if isinstance(node, JoinNode):
            rule = f"needs {node.need} of {node.of}" if node.need < node.of else f"waits for all {node.of}"
            extra = "; the rest are cancelled" if node.need < node.of else ""
            rows.append((d, "join", rule + extra, None, None, None, False))
            after_join = True
            continue
        if isinstance(node, ApprovalNode):
            continue
        if after_join and d == 0:
            rows.append((0, "then", "", None, None, None, False))
            after_join = False
        if isinstance(node, ToolNode):
            gated = node.id in approvals
            st = status.get(node.id)
            addr = f"{node.server}·{node.tool}"
            if st is not None and not st.exists:
                addr = f"✗ {addr}  {st.note}"
            why = node.risk_source
            if node.timeout_s:
                why += f"; timeout {_duration(node.timeout_s)}"
            if node.retries:
                why += f"; retries {node.retries}"
            if node.without_asking:
                why += "; WITHOUT ASKING"
            gate = approvals.get(node.id)
            if gate is not None and gate.question:
                why += f'; asks "{visible(gate.question)}"'
            rows.append((d, None, node.id, addr, node.risk, why, gated))
            for ref, what in ((node.preview, "preview"), (node.check, "check")):
                if ref is not None:
                    st = status.get(f"{node.id}#{what}")
                    raddr = f"{ref.server}·{ref.tool}"
                    if st is not None and not st.exists:
                        raddr = f"✗ {raddr}  {st.note}"
                    rows.append((d + 1, None, f"↳ {what}", raddr, ref.risk, ref.risk_source, False))
        elif isinstance(node, WriteNode):
            src = f" from {', '.join(node.inputs)}" if node.inputs else ""
            rows.append(
                (
                    d,
                    None,
                    node.id,
                    f"write{src}",
                    "text",
                    f'"{visible(node.prompt)}" ({writer}); no effect outside',
                    False,
                )
            )
        elif isinstance(node, QuestionNode):
            rows.append(
                (d, "ask", f'"{visible(node.text)}" — the run stops here until you answer yes', None, None, None, False)
            )
    return rows


def _asks_in(loop: LoopNode, approvals: Mapping[str, ApprovalNode]) -> bool:
    return any(m in approvals for m in loop.body)


def plan_card(
    plan: Plan,
    *,
    source: str | None = None,
    status: Mapping[str, ToolStatus] | None = None,
    writer: str = "offline writer",
    servers_note: str | None = None,
    servers: Mapping[str, str] | None = None,
):
    """The card a person approves the plan from (a rich renderable).
    ``servers``: per server the plan calls, the command it resolves to here."""
    from rich.console import Group
    from rich.text import Text

    # Every piece goes through `shown`: a recipe's name, a server file's command line and a
    # server's tool names are printed as they are, but never a control, bidirectional or
    # other hidden character in them (an escape sequence, U+202E), which would drive the
    # terminal or reorder the card instead of being read.
    title = Text.assemble(("Here is how this would run: ", "bold"), (shown(plan.recipe.name), "bold cyan"))
    if source:
        title.append(f"  ({shown(source)})", style="dim")
    rows: list[tuple[Any, ...]] = [
        (row[0], *(shown(v) if isinstance(v, str) else v for v in row[1:])) for row in plan_rows(plan, status, writer)
    ]
    cells = [
        ("  " * i + ("⚠ " if gated else "  ") + step, addr)
        for i, label, step, addr, risk, why, gated in rows
        if label is None
    ]
    w_step = max((len(c[0]) for c in cells), default=0)
    w_addr = min(56, max((len(c[1]) for c in cells), default=0))
    lines = []
    for indent, label, step, addr, risk, why, gated in rows:
        pad = "  " * indent
        if label is not None:
            lines.append(Text.assemble((pad + label, "bold magenta"), ("  " + (step or ""), "italic")))
            continue
        line = Text()
        line.append((pad + ("⚠ " if gated else "  ") + step).ljust(w_step), style="bold yellow" if gated else "")
        line.append("  ")
        line.append(addr.ljust(w_addr), style="red" if addr.startswith("✗") else "cyan")
        line.append("  ")
        line.append((risk or "").ljust(9), style=RISK_STYLE.get(risk or "", ""))
        line.append(why or "", style="bold red" if "WITHOUT ASKING" in (why or "") else "dim")
        lines.append(line)
    notes = []
    approvals = [n for n in plan.nodes if isinstance(n, ApprovalNode)]
    looped = {m for n in plan.nodes if isinstance(n, LoopNode) for m in n.body}
    index = plan.index()
    for gate in approvals:
        step = index[gate.step]
        if not isinstance(step, ToolNode):  # the verified plan makes every approval guard a tool step
            continue
        notes.append(
            Text.assemble(
                ("⚠ ", "bold yellow"),
                (shown(f"{step.server}·{step.tool}"), "bold"),
                f" {'cannot be undone' if step.risk == 'critical' else 'changes something outside vodou'}, so the run will stop and ask before `{step.id}` runs"
                + (" (once, in one card listing every item's payload). " if step.id in looped else ". "),
                (
                    "Write `without asking` under the step to opt out."
                    if step.risk != "critical"
                    else shown(
                        f'Only the policy file can let it run without asking: [tools."{step.server}.{step.tool}"] allow_without_asking = true.'
                    ),
                    "dim",
                ),
            )
        )
    for node in plan.nodes:
        if isinstance(node, ToolNode) and node.without_asking:
            notes.append(
                Text(
                    shown(f"✗ `{node.id}` ({node.server}·{node.tool}, {node.risk}) will run WITHOUT ASKING."),
                    style="bold red",
                )
            )
    for name, command in (servers or {}).items():
        notes.append(Text.assemble(("server ", "dim"), (shown(name), "cyan"), (f" = {shown(command)}", "dim")))
    if servers_note:
        notes.append(Text(shown(servers_note), style="dim"))
    notes.append(Text(f"plan {plan.fingerprint[:19]}…", style="dim"))
    return Group(title, *lines, Text(""), *notes)


def approval_card_text(
    *,
    run_id: str,
    step: ToolNode | None,
    question: str | None,
    payload: Any,
    fingerprint: str,
    preview: Any = None,
    expires_at: float | None = None,
    approvers: list[str] | None = None,
    server: Any = None,
    asked_as: str | None = None,
) -> str:
    """The card a person reads at an approval or a question, rendered from the frozen payload.

    Every surface shows this text and nothing else as the card, rendered again from the
    stored payload each time it is shown (:func:`stored_card`); the copy stored with the
    approval is only a record of what was shown when it was asked. Every value goes
    through ``text_safety``: hidden characters and look-alike letters are marked
    ``⟨U+…⟩`` and listed under the payload, and two payloads that differ never render
    to the same card. ``server`` is the binding of the server the step calls: which
    ``slack`` this is. A question's payload carries the outputs it asks about, shown
    whole: a person judges what they can read. ``asked_as``: the step the question is stored
    under when it is not the plan's step itself: a loop inside another asks once per outer
    item, and its card names that item's copy (``send[0]``; its rows are ``send[0]``'s items)."""
    lines = []
    if step is not None:
        lines.append(
            f"⚠ {visible(asked_as or step.id)}: {visible(step.server)}·{visible(step.tool)}  ({step.risk}: {visible(step.risk_source)})"
        )
        if server is not None:
            where = getattr(server, "workdir", None)
            lines.append(
                f"server {visible(step.server)}: {visible(server.command_line())}"
                + (f"  in {visible(where)}" if where else "")
                + (f"  (from {visible(server.source)})" if server.source else "")
            )
    if question:
        lines.append(f"question: {visible(question)}")
    if step is not None:
        lines.append("payload (frozen; exactly this runs if approved):")
        lines.extend(_indented(json_text(payload)))
        lines.extend(findings(payload).lines("the payload"))
        lines.extend(_defaults_filled(step, payload))
    else:
        lines.extend(_asked_about(payload))
    if preview is not None:
        ref = step.preview if step is not None else None
        # where the preview came from: a person reads it as the effect's own server's word, and
        # it may be any read tool (another server's), called with the recipe's own arguments
        lines.append(
            "preview:"
            if ref is None
            else f"preview: what {visible(ref.server)}·{visible(ref.tool)} said, called with "
            f"{json_text(ref.args, indent=None)} as the recipe writes them:"
        )
        lines.extend(_indented(json_text(preview)))
        lines.extend(findings(preview).lines("the preview"))
    lines.append(f"fingerprint: {fingerprint}")
    if expires_at is not None:
        lines.append("expires: " + time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at)))
    if approvers:
        lines.append("approvers: " + ", ".join(visible(a) for a in approvers))
    lines.append(f"run: {visible(run_id)}")
    return "\n".join(lines)


def _defaults_filled(step: ToolNode, payload: Any) -> list[str]:
    """Says which fields of the payload the recipe leaves out and the tool's input schema
    filled with its ``default`` (``runtime/calls.with_schema_defaults``): sent as shown, and
    not the recipe's own words. A loop's batch payload (``{"items": [...]}``) lists items."""
    if not isinstance(payload, dict) or not isinstance(step.args, dict):
        return []
    if "items" in payload and "items" not in step.args:
        return []
    filled = [k for k in payload if k not in step.args]
    if not filled:
        return []
    names = ", ".join(visible(k) for k in filled)
    return [
        f"from {visible(step.server)}·{visible(step.tool)}'s schema defaults (the recipe leaves them out; sent as shown): {names}"
    ]


ELICITATION = "elicitation"
"""The key of a stored question's payload that makes it a server's question (``runtime/elicit.py``)."""


def is_elicitation(payload: Any) -> bool:
    return isinstance(payload, dict) and set(payload) == {ELICITATION} and isinstance(payload[ELICITATION], dict)


def elicitation_card_text(
    *, run_id: str, step: ToolNode, payload: Any, fingerprint: str, expires_at: float | None = None,
    approvers: list[str] | None = None,
) -> str:  # fmt: skip
    """The card of a server's question in the middle of a step's call: who asks, in its own
    words (marked like every server text), and the fields it wants, with how to answer."""
    import time

    from .text_safety import findings, json_text

    asked = payload[ELICITATION]
    schema = asked.get("schema") or {}
    required = set(schema.get("required") or [])
    lines = [
        f"? {visible(step.id)}: {visible(step.server)}·{visible(step.tool)} asks, in the middle of its call:",
        f"question: {visible(str(asked.get('message', '')))}",
        "fields:",
    ]
    properties = schema.get("properties") or {}
    for name in sorted(properties, key=lambda n: n not in required):  # the required ones first
        prop = properties[name] if isinstance(properties[name], dict) else {}
        kind = prop.get("type", "any")
        extra = []
        if "enum" in prop:
            extra.append("one of " + ", ".join(visible(str(v)) for v in prop["enum"]))
        if "default" in prop:
            extra.append(f"default {visible(json_text(prop['default']))}")
        if prop.get("description"):
            extra.append(visible(str(prop["description"])))
        lines.append(
            f"  {visible(name)} ({kind}{', required' if name in required else ''})"
            + (": " + "; ".join(extra) if extra else "")
        )
    lines.extend(findings(payload).lines("the question"))
    lines.append(
        f"answer: recipe answer {visible(run_id)} {visible(step.id)} --fields '{{...}}'   (or --decline, --cancel)"
    )
    lines.append(f"fingerprint: {fingerprint}")
    if expires_at is not None:
        lines.append("expires: " + time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at)))
    if approvers:
        lines.append("approvers: " + ", ".join(visible(a) for a in approvers))
    lines.append(f"run: {visible(run_id)}")
    return "\n".join(lines)


def _indented(text: str, pad: str = "  ") -> list[str]:
    return [pad + line for line in text.split("\n")]


def _asked_about(payload: Any) -> list[str]:
    """A question's outputs: text as a block of lines (each marked, behind ``│``), anything
    else as JSON. The block keeps the card injective: its lines split only at newlines, and
    every other break or hidden character inside a line is marked."""
    if isinstance(payload, dict) and set(payload) == {"items"} and isinstance(payload["items"], list):
        # a question of its own in a loop: each item's part, with its own fingerprint
        lines = ["for each item, what it asks about (frozen with the question, exactly as the run goes on with it):"]
        found = Findings()
        for entry in payload["items"]:
            entry = entry if isinstance(entry, dict) else {}
            lines.append(
                f"  item {json_text(entry.get('item'))}  fingerprint {visible(str(entry.get('fingerprint')))}:"
            )
            part = entry.get("payload")
            lines.extend(_outputs_lines(part.get("outputs") if isinstance(part, dict) else part, "    ", found))
        lines.extend(found.lines("what it asks about"))
        return lines
    outputs = payload.get("outputs") if isinstance(payload, dict) else None
    if not isinstance(outputs, dict) or not outputs:
        return []
    lines = ["what it asks about (frozen with the question, exactly as the run goes on with it):"]
    found = Findings()
    lines.extend(_outputs_lines(outputs, "  ", found))
    lines.extend(found.lines("what it asks about"))
    return lines


def _outputs_lines(outputs: Any, indent: str, found: Findings) -> list[str]:
    """Outputs asked about, by name: text as a block of marked lines, anything else as JSON."""
    if not isinstance(outputs, dict):
        findings(outputs, found)
        return _indented(json_text(outputs), indent)
    lines = []
    for name in sorted(outputs):
        value = outputs[name]
        if isinstance(value, str):
            lines.append(f"{indent}{visible(name)} (text):")
            lines.extend(f"{indent}  │ " + visible(line) for line in value.split("\n"))
            found.add(value.replace("\n", ""))
        else:
            lines.append(f"{indent}{visible(name)}:")
            lines.extend(_indented(json_text(value), indent + "  "))
            findings(value, found)
    return lines


def question_outputs(plan: Plan, node: QuestionNode, outputs: Mapping[str, Any]) -> dict[str, Any]:
    """What a question asks a person to judge: the outputs of the steps it follows (through
    other questions, approvals and joins) and of the steps its text names, as they are now."""
    index = plan.index()
    wanted: list[str] = []
    seen: set[str] = set()
    stack = list(reversed(node.needs))
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        n = index.get(nid)
        if isinstance(n, (ToolNode, WriteNode)):
            wanted.append(nid)
        elif n is not None:
            stack.extend(reversed(n.needs))
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_-]*", node.text))
    wanted.extend(
        n.id for n in plan.nodes if n.id in named and isinstance(n, (ToolNode, WriteNode)) and n.id not in wanted
    )
    return {nid: outputs[nid] for nid in wanted if nid in outputs}


# --- a stored question, shown ---------------------------------------------------------------------


def stored_card(approval: Any, plan: Plan, bindings: Mapping[str, Any]) -> str:
    """The card of a stored question, rendered now from its frozen payload. Refused
    (``TamperedError``) when anything stored with it that the card shows or the run decides
    by (payload, check, risk verdict, preview, who may decide, expiry) is no longer what it
    was asked with (:func:`check_untampered`): a person never reads, nor decides, a card whose
    bytes are not the ones that would run."""
    payload = msgspec.json.decode(approval.payload_json)
    gate, step = check_untampered(approval, plan, bindings, payload)
    if isinstance(gate, ToolNode):  # a server's question, asked in the middle of this step's call
        return elicitation_card_text(
            run_id=approval.run_id, step=gate, payload=payload, fingerprint=approval.fingerprint,
            expires_at=approval.expires_at,
            approvers=msgspec.json.decode(approval.approvers_json) if approval.approvers_json else [],
        )  # fmt: skip
    question = gate.question if isinstance(gate, ApprovalNode) else gate.text
    return approval_card_text(
        run_id=approval.run_id, step=step, question=question, payload=payload, fingerprint=approval.fingerprint,
        preview=msgspec.json.decode(approval.preview_json) if approval.preview_json else None, expires_at=approval.expires_at,
        approvers=msgspec.json.decode(approval.approvers_json) if approval.approvers_json else [],
        server=bindings.get(step.server) if step is not None else None, asked_as=approval.step,
    )  # fmt: skip


REFUSED = "✗ refused: "
"""How the text in place of a tampered question's card begins (no card begins so)."""


def card_and_refusal(approval: Any, plan: Plan, bindings: Mapping[str, Any]) -> tuple[str, str | None]:
    """(:func:`stored_card`, None), or for a tampered question ("", the refusal shown in its
    place): a run's record still shows, with no card to decide from."""
    try:
        return stored_card(approval, plan, bindings), None
    except TamperedError as exc:
        return "", REFUSED + exc.message


def card_or_refusal(approval: Any, plan: Plan, bindings: Mapping[str, Any]) -> str:
    """:func:`stored_card`, or for a tampered question the refusal in its place."""
    card, refusal = card_and_refusal(approval, plan, bindings)
    return refusal or card


def check_untampered(
    approval: Any, plan: Plan, bindings: Mapping[str, Any], payload: Any = None
) -> tuple[Any, ToolNode | None]:
    """The question's gate and step, once what is stored of it is what it was asked with; else
    ``TamperedError``. The fingerprint recomputed over the row (payload, node, address, risk
    verdict, check read, server binding, and the rest of what the card shows: who may decide,
    the preview, the check's arguments, the server file's name) must be the one it was asked
    with (a question stored before the rest of the card was covered: as it was fingerprinted
    then); the step it is stored under must be the one its node guards; and it must expire when
    the plan says, counted from when it was asked."""
    index = plan.index()
    base, outer = split_copy(index, approval.node_id)  # a loop inside another: asked per outer item
    gate = index.get(base)
    guarded = index.get(gate.step) if isinstance(gate, ApprovalNode) else None
    step = guarded if isinstance(guarded, ToolNode) else None
    as_asked = False
    if isinstance(gate, ToolNode):  # a server's question in the middle of the step's call
        try:
            if payload is None:
                payload = msgspec.json.decode(approval.payload_json)
            as_asked = (
                is_elicitation(payload)
                and approval.step == gate.id
                and approval.expires_at == approval.asked_at + expiry_s(plan.options, gate)
                and gives_its_fingerprint(
                    approval, node_id=gate.id, address=gate.address, payload=payload, server=bindings.get(gate.server)
                )
            )
        except (msgspec.DecodeError, KeyError, TypeError):
            as_asked = False
        step = gate
    elif (isinstance(gate, ApprovalNode) and step is not None) or isinstance(gate, QuestionNode):
        node_id = (step.id if step is not None else gate.id) + outer
        try:
            if payload is None:
                payload = msgspec.json.decode(approval.payload_json)
            as_asked = (
                approval.step == node_id
                and approval.expires_at == approval.asked_at + expiry_s(plan.options, step)
                and gives_its_fingerprint(
                    approval, node_id=node_id, address=step.address if step is not None else "question", payload=payload,
                    server=bindings.get(step.server) if step is not None else None,
                )
            )  # fmt: skip
        except (msgspec.DecodeError, KeyError, TypeError):
            as_asked = False
    if not as_asked or not approval.policy_json:
        raise TamperedError(
            f"the stored payload of `{approval.step}`, or what was checked or shown with it (the preview, who may "
            f"decide, the expiry), no longer matches the fingerprint it was asked with ({approval.fingerprint}): "
            "it was edited in the store; it is not shown and cannot be decided",
            hint=f"nobody can tell what was meant to run: cancel the run (recipe cancel {approval.run_id}) and start a new one",
            run=approval.run_id, step=approval.step, fingerprint=approval.fingerprint,
        )  # fmt: skip
    return gate, step


def mermaid(plan: Plan) -> str:
    """The graph as a Mermaid flowchart, for READMEs."""
    ids = {n.id: f"n{i}" for i, n in enumerate(plan.nodes)}
    out = ["flowchart TD"]
    for n in plan.nodes:
        k = ids[n.id]
        if isinstance(n, ToolNode):
            label = f"{n.id}<br/>{n.server}·{n.tool}<br/>{n.risk}"
            out.append(f'  {k}["{_esc(label)}"]')
        elif isinstance(n, WriteNode):
            out.append(f'  {k}(["{_esc(n.id)}<br/>write"])')
        elif isinstance(n, JoinNode):
            out.append(f'  {k}{{"{_esc(n.id)}<br/>{n.need} of {n.of}"}}')
        elif isinstance(n, ApprovalNode):
            out.append(f'  {k}[/"⚠ approve {_esc(n.step)}"/]')
        elif isinstance(n, QuestionNode):
            out.append(f'  {k}[/"ask: {_esc(n.text)}"/]')
        elif isinstance(n, LoopNode):
            out.append(f'  {k}[["{_esc(visible(f"for each {n.var} in {n.over_text}"))}"]]')
        for need in n.needs:
            out.append(f"  {ids[need]} --> {k}")
    for n in plan.nodes:
        if isinstance(n, LoopNode):
            # the body, run once per item: a subgraph entered from the loop node
            out.append(f'  subgraph {ids[n.id]}b["each {_esc(n.var)}"]')
            out.extend(f"    {ids[m]}" for m in n.body)
            out.append("  end")
            out.append(f"  {ids[n.id]} -.-> {ids[n.id]}b")
    for n in plan.nodes:
        if isinstance(n, ApprovalNode):
            out.append(f"  style {ids[n.id]} fill:#ffe08a")
        elif isinstance(n, ToolNode) and n.risk != "read":
            out.append(f"  style {ids[n.id]} stroke:#d33,stroke-width:2px")
    return "\n".join(out) + "\n"


def _duration(seconds: int) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _esc(s: str) -> str:
    return s.replace('"', "#quot;")
