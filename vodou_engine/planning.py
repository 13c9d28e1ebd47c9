"""Plan a recipe against live servers: list their tools, never call one.

``recipe plan`` (online) and ``recipe run`` both resolve every step's
``server.tool`` here first, so a wrong address or a missing server is seen
while it is free to fix, and MCP annotations can raise a tool's risk.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from .cards import ToolStatus
from .compiler import ast, template
from .compiler.places import argument_places
from .compiler.source import Source
from .compiler.words import written_address, written_server
from .errors import ArgumentsError, RecipeError
from .plan import Plan, ToolNode, Where
from .policy import BUILTIN_SERVER, BUILTIN_TOOLS, Hints, hints_from
from .runtime.freeze import IDEMPOTENCY_FIELDS
from .tools.schema_check import problems
from .tools.schema_check import where as place_words


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
) -> tuple[dict[str, ToolStatus], dict[str, Hints | None]]:
    """Per step: does its tool exist (else the closest real name, written as a recipe
    writes it); and annotations as hints. ``disabled``: servers the file turns off."""
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
    from .tools.hub import open_hub

    wanted = [n for n in names if n in servers]
    if not wanted:
        return {}
    async with open_hub(servers, wanted) as hub:
        return {n: hub.tools(n) for n in wanted}


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


def templated_paths(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Paths of the strings inside ``value`` that hold a ``{reference}``: filled at run time."""
    if isinstance(value, str):
        return [path] if template.ref_names(value) else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in templated_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in templated_paths(v, (*path, i))]
    return []


def with_engine_fields(args: Any, schema: Mapping[str, Any]) -> Any:
    """The arguments as the call will carry them: the idempotency key goes in when the
    schema has a place for it (``runtime/calls.py``), so a schema that requires it is met."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(args, dict) or not isinstance(properties, Mapping):
        return args
    for name in IDEMPOTENCY_FIELDS:
        if name in properties:
            return {**args, name: args.get(name, "the run's idempotency key")}
    return args


def check_arguments(plan: Plan, tools: Mapping[str, Mapping[str, Any]], text: str | None, path: str | None) -> None:
    """Raise ArgumentsError when the literal arguments of a step (or of its ``preview:`` or
    ``check:``) break the tool's input schema, pointing at each value (or at the object
    a required field is missing from) as the compiler points at its own errors. Values a
    reference fills are left to the gate, which checks the frozen payload."""
    source = Source(text or "", path)
    found: list[RecipeError] = []
    for node in plan.nodes:
        if not isinstance(node, ToolNode):
            continue
        calls: list[tuple[str, str, dict[str, Any], Where | None, str]] = [
            (node.server, node.tool, node.args, node.where, f"step `{node.id}`")
        ]
        for label, ref in (("preview", node.preview), ("check", node.check)):
            if ref is not None:
                calls.append((ref.server, ref.tool, ref.args, ref.where, f"the {label} of `{node.id}`"))
        for server, tool, args, where, who in calls:
            info = tools.get(server, {}).get(tool)
            schema = getattr(info, "input_schema", None)
            if not schema:
                continue
            faults = problems(schema, with_engine_fields(args, schema), templated=templated_paths(args))
            if not faults:
                continue
            places = argument_places(text, where.line, where.column) if text and where else None
            for fault in faults:
                pos = None
                if places is not None:
                    on_key = fault.keyword == "additionalProperties" or fault.path not in places.values
                    pos = (places.keys if on_key else places.values).get(fault.path) or places.values.get(())
                if pos is None and where is not None:
                    pos = ast.Pos(where.line, where.column)
                at = "" if fault.keyword == "required" or not fault.path else f" at `{place_words(fault.path)}`"
                found.append(
                    source.error(
                        f"{who}: {written_address(server, tool)}{at}: {fault.message}",
                        pos if text else None,
                        hint=f"the server's input schema says so ({fault.keyword}); change the value, "
                        "or see the tool's schema with `recipe plan --json`",
                        cls=ArgumentsError,
                    )
                )
    if found:
        first = found[0]
        assert isinstance(first, ArgumentsError)
        first.also = found[1:]
        raise first
