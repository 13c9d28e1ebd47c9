"""What a person reads: the plan card, the approval card, the run timeline.

The plan card mirrors the graph, not the recipe text: a ⚠ row exists exactly
when the graph has an approval node for that step, so the warning and the
gate cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .plan import ApprovalNode, JoinNode, Plan, QuestionNode, ToolNode, WriteNode

RISK_STYLE = {"read": "green", "write": "yellow", "critical": "bold red"}


@dataclass
class ToolStatus:
    """What a live server said about a step's tool: present, or the closest name."""

    exists: bool
    note: str = ""


def groups(plan: Plan) -> tuple[dict[str, list[str]], dict[str, int]]:
    """For each node: the joins whose items contain it (outermost first), and its depth."""
    inside: dict[str, list[str]] = {}
    for node in plan.nodes:
        if isinstance(node, JoinNode):
            for item in node.members:
                for member in item:
                    inside.setdefault(member, []).insert(0, node.id)
    return inside, {k: len(v) for k, v in inside.items()}


def plan_rows(plan: Plan, status: Mapping[str, ToolStatus] | None = None, writer: str = "offline writer") -> list[tuple]:
    """Rows of (indent, label, step, address, risk, why, gated) in execution order."""
    status = status or {}
    approvals = {n.step: n for n in plan.nodes if isinstance(n, ApprovalNode)}
    inside, depth = groups(plan)
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
            rows.append((depth.get(join.id, 0), "together" + name, "they don't need each other, so they run at the same time", None, None, None, False))
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
                why += f'; asks "{gate.question}"'
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
            rows.append((d, None, node.id, f"write{src}", "text", f'"{node.prompt}" ({writer}); no effect outside', False))
        elif isinstance(node, QuestionNode):
            rows.append((d, "ask", f'"{node.text}" — the run stops here until you answer yes', None, None, None, False))
    return rows


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

    title = Text.assemble(("Here is how this would run: ", "bold"), (plan.recipe.name, "bold cyan"))
    if source:
        title.append(f"  ({source})", style="dim")
    rows = plan_rows(plan, status, writer)
    cells = [("  " * i + ("⚠ " if gated else "  ") + step, addr) for i, label, step, addr, risk, why, gated in rows if label is None]
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
    index = plan.index()
    for gate in approvals:
        step = index[gate.step]
        notes.append(
            Text.assemble(
                ("⚠ ", "bold yellow"),
                (f"{step.server}·{step.tool}", "bold"),
                f" {'cannot be undone' if step.risk == 'critical' else 'changes something outside vodou'}, so the run will stop and ask before `{step.id}` runs. ",
                (
                    "Write `without asking` under the step to opt out."
                    if step.risk != "critical"
                    else f'Only the policy file can let it run without asking: [tools."{step.server}.{step.tool}"] allow_without_asking = true.',
                    "dim",
                ),
            )
        )
    for node in plan.nodes:
        if isinstance(node, ToolNode) and node.without_asking:
            notes.append(Text(f"✗ `{node.id}` ({node.server}·{node.tool}, {node.risk}) will run WITHOUT ASKING.", style="bold red"))
    for name, command in (servers or {}).items():
        notes.append(Text.assemble(("server ", "dim"), (name, "cyan"), (f" = {command}", "dim")))
    if servers_note:
        notes.append(Text(servers_note, style="dim"))
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
) -> str:
    """The exact text shown at an approval; stored with the approval for the audit log.
    ``server`` is the binding of the server the step calls: which ``slack`` this is."""
    import json
    import time

    lines = []
    if step is not None:
        lines.append(f"⚠ {step.id}: {step.server}·{step.tool}  ({step.risk}: {step.risk_source})")
        if server is not None:
            where = getattr(server, "workdir", None)
            lines.append(f"server {step.server}: {server.command_line()}" + (f"  in {where}" if where else "") + (f"  (from {server.source})" if server.source else ""))
    if question:
        lines.append(f"question: {question}")
    if step is not None:
        lines.append("payload (frozen; exactly this runs if approved):")
        lines.extend("  " + l for l in json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True).splitlines())
    if preview is not None:
        lines.append("preview:")
        lines.extend("  " + l for l in json.dumps(preview, indent=2, ensure_ascii=False, sort_keys=True, default=str).splitlines())
    lines.append(f"fingerprint: {fingerprint}")
    if expires_at is not None:
        lines.append("expires: " + time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(expires_at)))
    if approvers:
        lines.append("approvers: " + ", ".join(approvers))
    lines.append(f"run: {run_id}")
    return "\n".join(lines)


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
        for need in n.needs:
            out.append(f"  {ids[need]} --> {k}")
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
