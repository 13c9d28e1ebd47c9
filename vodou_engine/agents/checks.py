"""A recipe text checked for an agent or a model: the card as text and as JSON, or the
errors as data (message, line, column, the source line with a caret under the place,
hint, code).

The compiler decides what a recipe means, and the policy what each tool's risk is;
nothing here keeps a rule of its own. Tools are resolved against a catalogue that was
listed from the live servers (``catalogue.py``), so a misspelt tool is reported with
the closest real name and a server's annotations raise a risk, exactly as
``Runs.inspect`` does, without starting the servers again for every check. A run is
never started from a check: ``start_run`` resolves against the live servers afresh.

An error becomes data in ``error_data.py``, which the server uses without loading the
compiler; who decides an agent's run is ``approvers.py``'s.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from rich.console import Console

from ..cards import plan_card
from ..compiler import compile_recipe
from ..compiler.words import written_address
from ..errors import ArgumentsError, RecipeError, VodouError
from ..plan import ApprovalNode, JoinNode, QuestionNode, ToolNode, ToolRef, WriteNode
from ..planning import check_arguments, missing, resolve, servers_of
from ..text_safety import source_warnings
from .error_data import error_data


def render(renderable: Any, width: int = 120) -> str:
    """A rich renderable as plain text (no colour, no control codes). Columns are laid
    out for ``width``; a longer line is kept whole, not wrapped mid-sentence."""
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None, highlight=False, emoji=False).print(renderable, soft_wrap=True)
    return buf.getvalue()


OPT_OUT_ADVICE = "Write `without asking` under the step to opt out."
"""The card's advice to a person. An agent's recipe may not opt out, so an agent reads
instead who can."""
FOR_AN_AGENT = "Only a person can let it run without asking (their own recipe file, or the policy file)."


def card_text(
    plan: Any,
    *,
    status: Mapping[str, Any] | None = None,
    servers: Mapping[str, str] | None = None,
    servers_note: str | None = None,
    source: str | None = None,
    agent: bool = True,
) -> str:
    model = plan.options.model
    writer = f"model {model}" if model else "the model the run is started with, else the offline writer"
    text = render(
        plan_card(plan, source=source, status=status, writer=writer, servers_note=servers_note, servers=servers)
    )
    return text.replace(OPT_OUT_ADVICE, FOR_AN_AGENT) if agent else text


def card_data(plan: Any, status: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The plan card as data: one entry per step, in the order the card shows them."""
    status = status or {}
    gates = {n.step: n for n in plan.nodes if isinstance(n, ApprovalNode)}
    steps: list[dict[str, Any]] = []
    for n in plan.nodes:
        if isinstance(n, ToolNode):
            st = status.get(n.id)
            gate = gates.get(n.id)
            step: dict[str, Any] = {
                "step": n.id, "kind": "tool", "address": n.address, "risk": n.risk, "risk_source": n.risk_source,
                "asks_first": gate is not None, "without_asking": n.without_asking, "args": n.args, "needs": n.needs,
            }  # fmt: skip
            if gate is not None:
                step["approval"] = gate.id
                if gate.question:
                    step["question"] = gate.question
            if st is not None:
                step["tool_exists"] = st.exists
                if st.note:
                    step["note"] = st.note
            for what in ("preview", "check"):
                ref = getattr(n, what)
                if ref is not None:
                    rs = status.get(f"{n.id}#{what}")
                    step[what] = {
                        "address": f"{ref.server}.{ref.tool}",
                        "risk": ref.risk,
                        "risk_source": ref.risk_source,
                        "args": ref.args,
                    }
                    if rs is not None and not rs.exists:
                        step[what]["note"] = rs.note
            steps.append(step)
        elif isinstance(n, WriteNode):
            steps.append(
                {"step": n.id, "kind": "write", "prompt": n.prompt, "from": n.inputs, "needs": n.needs, "risk": "text"}
            )
        elif isinstance(n, QuestionNode):
            steps.append({"step": n.id, "kind": "question", "question": n.text, "needs": n.needs})
        elif isinstance(n, JoinNode):
            steps.append({"step": n.id, "kind": "join", "need": n.need, "of": n.of, "needs": n.needs})
    return {
        "recipe": plan.recipe.name,
        "fingerprint": plan.fingerprint,
        "inputs": [
            {"name": i.name, "required": i.required, **({} if i.required else {"default": i.default})}
            for i in plan.inputs
        ],
        "approvers": list(plan.options.approvers),
        "approval_expires_s": plan.options.approval_expires_s,
        "model": plan.options.model,
        "steps": steps,
        "asks_before": list(gates),
    }


def opt_out_error(plan: Any) -> Any:
    """The error an agent's recipe that opts out of asking gets: the run API refuses such a
    recipe from an agent when it is started or saved; a check says so first."""
    opted = [n for n in plan.nodes if isinstance(n, ToolNode) and n.without_asking]
    if not opted:
        return None
    where = opted[0].where
    return RecipeError(
        f"a recipe from an agent may not opt out of asking (`without asking` / `don't ask` under `{opted[0].id}`); nothing was saved or run",
        line=where.line if where else None,
        column=where.column if where else None,
        hint="remove `without asking`: the run stops and asks a person before the step; only a person's recipe file, or the policy file, can let an effect run without asking",
    )


def _with_source(exc: Any, text: str) -> Any:
    """Give a positioned error without a source line the line it points at."""
    if getattr(exc, "line", None) and getattr(exc, "source_line", None) is None:
        lines = text.splitlines()
        if 0 < exc.line <= len(lines):
            exc.source_line = lines[exc.line - 1]
            exc.facts["source_line"] = exc.source_line
    return exc


class Checked:
    """What a check found: ``plan`` (None when it does not compile), ``errors`` (data),
    ``status`` per step (does its tool exist), ``exceptions`` (the errors themselves)."""

    def __init__(self) -> None:
        self.plan: Any = None
        self.errors: list[dict[str, Any]] = []
        self.exceptions: list[Any] = []
        self.status: dict[str, Any] = {}
        self.servers: dict[str, str] = {}
        self.note: str | None = None
        self.warnings: list[str] = []
        """Characters written into the text that nobody reading it sees (``text_safety``)."""

    @property
    def ok(self) -> bool:
        return self.plan is not None and not self.errors

    def add(self, exc: Any) -> None:
        self.exceptions.append(exc)
        self.errors.append(error_data(exc))

    def card(self) -> str | None:
        return (
            None
            if self.plan is None
            else card_text(self.plan, status=self.status, servers=self.servers, servers_note=self.note)
        )

    def as_data(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.ok, "errors": self.errors}
        if self.warnings:
            out["warnings"] = self.warnings
        if self.plan is not None:
            out["card"] = self.card()
            out["plan"] = card_data(self.plan, self.status)
        return out


def check_text(
    text: str, *, name: str | None = None, policy: Any, catalogue: Any = None, servers: Any = None, agent: bool = True
) -> Checked:
    """Compile ``text``; with a ``catalogue``, resolve every tool in it and raise risks from
    the listed annotations; with ``agent``, an opt-out of asking is an error."""
    out = Checked()
    path = f"{name}.recipe" if name else None
    out.warnings = source_warnings(text, path)

    try:
        plan = compile_recipe(text, path, policy=policy)
    except VodouError as exc:
        out.add(_with_source(exc, text))
        return out
    if catalogue is not None:
        configured = servers.servers if servers is not None else dict.fromkeys(catalogue.listed)
        status, hints = resolve(
            plan, configured, catalogue.listed, servers.disabled if servers is not None else (), catalogue.task_only
        )
        for key, st in status.items():
            server = _server_of(plan, key)
            if not st.exists and server in catalogue.unavailable:
                st.note = f"server `{server}` could not be started: {catalogue.unavailable[server]}"
        out.status = status
        if servers is not None:
            out.servers = {n: servers.servers[n].command_line() for n in servers_of(plan) if n in servers.servers}
            out.note = f"servers from {servers.source}; tools listed, none called"
        if hints:
            try:
                plan = compile_recipe(text, path, policy=policy, hints=hints)
            except VodouError as exc:
                out.add(_with_source(exc, text))
                return out
        lines = text.splitlines()
        index = plan.index()
        for key in missing(status):
            node = index.get(key.split("#", 1)[0])
            where = getattr(node, "where", None)
            line, column, width = (where.line, where.column, 1) if where else (None, None, 1)
            ref = getattr(node, key.partition("#")[2], None) if "#" in key else node
            address = written_address(ref.server, ref.tool) if isinstance(ref, (ToolNode, ToolRef)) else None
            if where and address:  # point at the address itself, on the step's line or an option's below it
                for number in range(where.line, len(lines) + 1):
                    found = lines[number - 1].find(address)
                    if found >= 0:
                        line, column, width = number, found + 1, len(address)
                        break
            unknown = RecipeError(
                f"step `{key.split('#', 1)[0]}`: {status[key].note}",
                path=path,
                line=line,
                column=column,
                source_line=lines[line - 1] if line and 0 < line <= len(lines) else None,
                hint="use a tool the catalogue lists (list_tools), with its address exactly as listed",
                width=width,
            )
            out.add(unknown)
            out.errors[-1]["code"] = "tool.unknown"
        if not missing(status):  # arguments the server would refuse: each at its value, as `recipe plan` says
            try:
                check_arguments(plan, catalogue.listed, text, path)
            except ArgumentsError as exc:
                faults, exc.also = [exc, *exc.also], []
                for fault in faults:
                    out.add(fault)
    out.plan = plan
    if agent:
        opt_out = opt_out_error(plan)
        if opt_out is not None:
            opt_out.path = path
            out.add(_with_source(opt_out, text))
    return out


def _server_of(plan: Any, key: str) -> str | None:
    node_id, _, what = key.partition("#")
    node = plan.index().get(node_id)
    if node is None:
        return None
    ref = getattr(node, what, None) if what else node
    return getattr(ref, "server", None)
