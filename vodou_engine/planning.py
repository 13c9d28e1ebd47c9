"""Plan a recipe against live servers: list their tools, never call one.

``recipe plan`` (online) and ``recipe run`` both resolve every step's
``server.tool`` here first, so a wrong address or a missing server is seen
while it is free to fix, and MCP annotations can raise a tool's risk.
``plan`` takes a server's tools from the cache (``toolcache.py``) while its
binding is unchanged, and says how old they are; a run lists them live.
"""

from __future__ import annotations

import difflib
import hashlib
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

import msgspec

from . import toolcache
from .cards import ToolStatus
from .compiler import ast, cache, compile_recipe, template
from .compiler.places import argument_places
from .compiler.source import Source
from .compiler.words import written_address, written_server
from .errors import ArgumentsError, RecipeError, UsageError
from .plan import RISK_ORDER, Plan, ToolNode, Where
from .policy import BUILTIN_SERVER, BUILTIN_TOOLS, Hints, Policy, hints_from
from .runtime.freeze import key_field
from .servers import ServerConfig
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


class Listed(msgspec.Struct, frozen=True, kw_only=True):
    """When each server's tools were listed (epoch seconds) and whether from the cache."""

    at: float
    cached: bool


async def list_tools_cached(
    servers: Mapping[str, ServerConfig],
    names: list[str],
    *,
    source: str,
    cached: bool = True,
    clock: Callable[[], float] = time.time,
) -> tuple[dict[str, dict], dict[str, Listed]]:
    """Tools of the configured ones of ``names``: from the cache (``toolcache.py``) for a
    server whose binding has not changed since it was listed, when ``cached``; the rest
    started and listed live, and the cache written. Only ``plan`` asks for the cache: a
    run always lists live (:func:`list_tools` through the run's hub)."""
    import trio

    wanted = [n for n in names if n in servers]
    if not wanted:
        return {}, {}

    def keys() -> dict[str, str | None]:  # binds each server: reads its files, so off the trio thread
        return {n: toolcache.key(n, servers[n], source=source) for n in wanted}

    def look(k: dict[str, str | None]) -> dict[str, toolcache.Listing]:
        return {n: hit for n in wanted if (hit := toolcache.get(n, k[n])) is not None}

    k = await trio.to_thread.run_sync(keys)
    hits = await trio.to_thread.run_sync(look, k) if cached else {}
    tools: dict[str, dict] = {n: dict(hit.tools) for n, hit in hits.items()}
    listed = {n: Listed(at=hit.listed_at, cached=True) for n, hit in hits.items()}
    live = [n for n in wanted if n not in hits]
    if live:
        fresh = await list_tools(servers, live)
        now = clock()

        def keep() -> None:
            for n, got in fresh.items():
                toolcache.put(n, k.get(n), got, now=now)

        await trio.to_thread.run_sync(keep)
        tools.update(fresh)
        listed.update({n: Listed(at=now, cached=False) for n in fresh})
    return {n: tools[n] for n in wanted if n in tools}, listed


def kept_tools(
    servers: Mapping[str, ServerConfig], names: list[str], *, source: str
) -> tuple[dict[str, dict], dict[str, Listed]] | None:
    """Every configured one of ``names`` from the cache, or None when one must be started.
    Blocking (it reads the servers' files): not on a trio thread."""
    wanted = [n for n in names if n in servers]
    tools: dict[str, dict] = {}
    listed: dict[str, Listed] = {}
    for n in wanted:
        hit = toolcache.get(n, toolcache.key(n, servers[n], source=source))
        if hit is None:
            return None
        tools[n] = dict(hit.tools)
        listed[n] = Listed(at=hit.listed_at, cached=True)
    return tools, listed


def stale(plan: Plan, tools: Mapping[str, Mapping[str, object]], listed: Mapping[str, Listed]) -> list[str]:
    """Servers whose tools came from the cache and lack a tool a step names: listed again
    live before the card calls the tool missing (it may have been added since)."""
    out: list[str] = []
    for node in plan.nodes:
        if isinstance(node, ToolNode):
            for server, tool in (
                (node.server, node.tool),
                *((ref.server, ref.tool) for ref in (node.preview, node.check) if ref is not None),
            ):
                hit = listed.get(server)
                if hit is not None and hit.cached and tool not in tools.get(server, {}) and server not in out:
                    out.append(server)
    return out


def compile_with_hints(
    text: str, path: str | None, policy: Policy, hints: Mapping[str, Hints | None], *, memo: bool = False
) -> Plan:
    """The recipe compiled with the servers' annotations; ``memo`` (the card only, never a
    run): from the compile memo, keyed by the annotations too."""
    if not memo:
        return compile_recipe(text, path, policy=policy, hints=hints)
    said = hashlib.sha256(msgspec.json.encode(dict(hints), order="deterministic")).hexdigest()
    k = cache.key(text, path, f"{policy.digest}:{policy.source}:hints:{said}")
    plan = cache.get(k)
    if plan is None:
        plan = compile_recipe(text, path, policy=policy, hints=hints)
        cache.put(k, plan)
    return plan


def listed_note(listed: Mapping[str, Listed], now: float) -> str:
    """The card's words for when the tools were listed: "tools listed just now" when every
    server was started, else how old each cached list is and how to list them again."""
    if not listed:
        return "tools listed"
    if not any(v.cached for v in listed.values()):
        return "tools listed just now"
    by_age: dict[str, list[str]] = {}
    for name, v in sorted(listed.items(), key=lambda kv: -kv[1].at):
        by_age.setdefault(toolcache.age(now - v.at), []).append(name)
    if len(by_age) == 1:
        (when,) = by_age
        said = f"tools listed {when}"
    else:
        said = "tools listed " + ", ".join(f"{when} ({', '.join(names)})" for when, names in by_age.items())
    return said + " (kept from then: `plan --refresh` lists them again)"


async def list_tools(servers: Mapping[str, ServerConfig], names: list[str]) -> dict[str, dict]:
    """Start the configured ones of ``names`` in parallel; list tools; close them."""
    tools, _ = await survey(servers, names)
    return tools


async def survey(
    servers: Mapping[str, ServerConfig], names: list[str]
) -> tuple[dict[str, dict], dict[str, frozenset[str]]]:
    """:func:`list_tools`, and per server the tools it lists as callable only as a task."""
    from .tools.hub import open_hub  # here: imports trio

    wanted = [n for n in names if n in servers]
    if not wanted:
        return {}, {}
    async with open_hub(servers, wanted) as hub:
        return {n: hub.tools(n) for n in wanted}, {n: hub.task_required(n) for n in wanted}


def task_only_of(tools: Mapping[str, Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """Per server, the tools its listing (live or kept) says are callable only as a task."""
    return {
        n: frozenset(name for name, info in listed.items() if getattr(info, "task_required", False))
        for n, listed in tools.items()
    }


def check_hints(plan: Plan, policy, hints: Mapping[str, Hints | None]) -> None:
    """An actions.json cannot claim a lower risk than its live server now declares."""
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
    field = key_field(schema)
    if not isinstance(args, dict) or field is None:
        return args
    return {**args, field: args.get(field, "the run's idempotency key")}


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
