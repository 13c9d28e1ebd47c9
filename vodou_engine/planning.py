"""Plan a recipe against live servers: list their tools, never call one.

``recipe plan`` (online) and ``recipe run`` both resolve every step's
``server.tool`` here first, so a wrong address or a missing server is seen
while it is free to fix, and MCP annotations can raise a tool's risk.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping

from .cards import ToolStatus
from .compiler.words import written_address, written_server
from .plan import Plan, ToolNode
from .policy import BUILTIN_SERVER, BUILTIN_TOOLS, Hints, hints_from


def servers_of(plan: Plan) -> list[str]:
    names: list[str] = []
    for node in plan.nodes:
        if isinstance(node, ToolNode):
            names.append(node.server)
            for ref in (node.preview, node.check):
                if ref is not None:
                    names.append(ref.server)
    return list(dict.fromkeys(names))


def resolve(
    plan: Plan,
    configured: Mapping[str, object],
    tools: Mapping[str, Mapping[str, object]],
    disabled: Collection[str] = (),
    task_only: Mapping[str, Collection[str]] | None = None,
) -> tuple[dict[str, ToolStatus], dict[str, Hints | None]]:
    """Per step: does its tool exist (else the closest real name, written as a recipe
    writes it); and annotations as hints. ``disabled``: servers the file turns off.
    ``task_only``: per server, the tools it lists as callable only as a task
    (``execution.taskSupport: "required"``); a step calling one is refused here, before
    anything runs, since this client makes no task-augmented calls (docs/servers.md)."""
    status: dict[str, ToolStatus] = {}
    hints: dict[str, Hints | None] = {}

    def one(key: str, server: str, tool: str) -> None:
        if server == BUILTIN_SERVER:
            known = sorted(BUILTIN_TOOLS)
            near = difflib.get_close_matches(tool, known, n=1)
            status[key] = ToolStatus(
                tool in BUILTIN_TOOLS,
                ""
                if tool in BUILTIN_TOOLS
                else f"no built-in tool `{tool}`" + (f"; closest: vodou.{near[0]}" if near else ""),
            )
            return
        if server in disabled:
            status[key] = ToolStatus(
                False, f'server `{server}` is disabled ("disabled": true in the server file), so it is never started'
            )
            return
        if server not in configured:
            near = difflib.get_close_matches(server, list(configured), n=1)
            note = f"server `{server}` is not configured" + (
                f"; did you mean `{written_server(near[0])}`?" if near else ""
            )
            status[key] = ToolStatus(False, note)
            return
        listed = tools.get(server, {})
        if tool not in listed:
            near = difflib.get_close_matches(tool, list(listed), n=1, cutoff=0.4)
            note = f"no tool `{tool}` on {server}" + (f"; closest: {written_address(server, near[0])}" if near else "")
            status[key] = ToolStatus(False, note)
            return
        if task_only is not None and tool in task_only.get(server, ()):
            status[key] = ToolStatus(
                False,
                f"{written_address(server, tool)} can only be called as a task (its server lists it with "
                'execution.taskSupport "required"), and the engine does not make task calls; '
                "use another tool, or a server that also offers it as a plain call",
            )
            return
        status[key] = ToolStatus(True)
        hints[f"{server}.{tool}"] = hints_from(listed[tool])

    for node in plan.nodes:
        if isinstance(node, ToolNode):
            one(node.id, node.server, node.tool)
            if node.preview is not None:
                one(f"{node.id}#preview", node.preview.server, node.preview.tool)
            if node.check is not None:
                one(f"{node.id}#check", node.check.server, node.check.tool)
    return status, hints


async def list_tools(servers: Mapping[str, object], names: list[str]) -> dict[str, dict]:
    """Start the configured ones of ``names`` in parallel; list tools; close them."""
    tools, _ = await survey(servers, names)
    return tools


async def survey(servers: Mapping[str, object], names: list[str]) -> tuple[dict[str, dict], dict[str, frozenset[str]]]:
    """:func:`list_tools`, and per server the tools it lists as callable only as a task."""
    from .tools.hub import open_hub

    wanted = [n for n in names if n in servers]
    if not wanted:
        return {}, {}
    async with open_hub(servers, wanted) as hub:
        return {n: hub.tools(n) for n in wanted}, {n: hub.task_required(n) for n in wanted}


def check_hints(plan: Plan, policy, hints: Mapping[str, Hints | None]) -> None:
    """An actions.json cannot claim a lower risk than its live server now declares."""
    from .errors import UsageError
    from .plan import RISK_ORDER

    for n in plan.nodes:
        if isinstance(n, ToolNode) and n.address in hints:
            risk, source = policy.assess(n.server, n.tool, hints[n.address])
            if RISK_ORDER[risk] > RISK_ORDER[n.risk]:
                raise UsageError(
                    f"step `{n.id}`: {n.address} is {risk} ({source}), but the plan says {n.risk}; nothing was run",
                    hint="recompile the recipe so the gate matches the tool",
                )


def missing(status: Mapping[str, ToolStatus]) -> list[str]:
    return [k for k, v in status.items() if not v.exists]
