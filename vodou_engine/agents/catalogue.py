"""The configured servers' tools, each with its risk and where the risk came from.

Servers are started (each on its own, all at the same time) and their tools
listed; no tool is called. A server that cannot start is reported with the
reason and the others are still listed: one broken entry in a server file
must not hide the rest of the catalogue from an agent or a model.

The risk is the policy's verdict (``Policy.assess``) from the tool's name,
the policy file and the server's MCP annotations (``policy.hints_from``), the
same verdict the compiler gives a step that calls the tool.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import msgspec
import trio

from ..compiler.words import written_address
from ..errors import VodouError
from ..policy import hints_from
from ..runs import plain_error
from ..servers import ServerSet
from ..tools.hub import open_hub

SKIPPED_ARGS = ("idempotency_key",)
"""Arguments the engine fills in itself (an effect's idempotency key): never drafted."""


class ToolEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    server: str
    tool: str
    address: str
    risk: str
    risk_source: str
    asks_first: bool
    """A step calling it stops and asks a person (risk write or critical)."""
    description: str = ""
    title: str | None = None
    input_schema: dict[str, Any] = {}
    annotations: dict[str, bool] = {}
    """The MCP behaviour hints the server set (unset ones are left out)."""


class Catalogue:
    """Tools listed by live servers: ``listed`` (server -> name -> hub ToolInfo) for
    resolving a plan, ``entries`` for agents and prompts."""

    def __init__(
        self,
        listed: Mapping[str, Mapping[str, Any]],
        unavailable: Mapping[str, str],
        source: str,
        policy: Any,
        fetched_at: float | None = None,
        task_only: Mapping[str, frozenset[str]] | None = None,
    ):
        self.listed = {k: dict(v) for k, v in listed.items()}
        self.task_only = dict(task_only or {})
        """Per server, the tools it lists as callable only as a task (refused when a recipe names one)."""
        self.unavailable = dict(unavailable)
        self.source = source
        self.fetched_at = time.time() if fetched_at is None else fetched_at
        self.server_set: ServerSet | None = None
        """The server file the tools were listed from, set by whoever fetched them."""
        self.entries = [
            entry(server, info, policy)
            for server in sorted(self.listed)
            for info in sorted(self.listed[server].values(), key=lambda i: i.name)
        ]

    def as_data(self) -> dict[str, Any]:
        return {
            "servers_source": self.source,
            "tools": msgspec.to_builtins(self.entries),
            "unavailable": self.unavailable,
            "note": "risk: read runs freely; write and critical stop the run and ask a person first. Tools are listed, none called.",
        }

    def prompt_text(self, *, max_description: int = 240) -> str:
        """The catalogue as a model reads it: address, risk, description, arguments."""
        lines = []
        for e in self.entries:
            gate = "asks a person first" if e.asks_first else "runs freely"
            desc = " ".join(e.description.split())
            if len(desc) > max_description:
                desc = desc[: max_description - 1] + "…"
            lines.append(f"- {e.address}  [{e.risk}: {e.risk_source}; {gate}]" + (f"  {desc}" if desc else ""))
            args = describe_args(e.input_schema)
            if args:
                lines.append(f"    arguments: {args}")
        for server, why in sorted(self.unavailable.items()):
            lines.append(f"- {server}: unavailable ({why}); do not use its tools")
        return "\n".join(lines) if lines else "(no tools: no server is configured)"


def entry(server: str, info: Any, policy: Any) -> ToolEntry:
    risk, source = policy.assess(server, info.name, hints_from(info))
    annotations = {
        key: value
        for key, value in (
            ("readOnlyHint", info.read_only),
            ("destructiveHint", info.destructive),
            ("idempotentHint", info.idempotent),
            ("openWorldHint", info.open_world),
        )
        if value is not None
    }
    return ToolEntry(
        server=server, tool=info.name, address=written_address(server, info.name), risk=risk, risk_source=source, asks_first=risk != "read",
        description=info.description or "", title=info.title, input_schema=dict(info.input_schema or {}), annotations=annotations,
    )  # fmt: skip


def describe_args(schema: Mapping[str, Any]) -> str:
    """``name: type (required), ...`` from a JSON Schema's top-level properties."""
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return ""
    required = set(schema.get("required") or [])
    out = []
    for name, spec in props.items():
        if name in SKIPPED_ARGS:
            continue
        kind = _type_of(spec)
        out.append(f"{name}: {kind}" + (" (required)" if name in required else ""))
    return ", ".join(out)


def _type_of(spec: Any) -> str:
    if not isinstance(spec, Mapping):
        return "any"
    if "type" in spec:
        t = spec["type"]
        if t == "array" and isinstance(spec.get("items"), Mapping):
            return f"array of {_type_of(spec['items'])}"
        return "|".join(t) if isinstance(t, list) else str(t)
    for key in ("anyOf", "oneOf"):
        if isinstance(spec.get(key), list):
            kinds = [_type_of(s) for s in spec[key]]
            return "|".join(k for k in dict.fromkeys(kinds) if k != "null") or "null"
    if "enum" in spec:
        return "one of " + ", ".join(map(str, spec["enum"]))
    return "any"


async def fetch(
    servers: Any, policy: Any, names: list[str] | None = None, *, start_timeout: float | None = None
) -> Catalogue:
    """List the tools of ``names`` (default: every configured server), each server
    started on its own; one that fails is reported in ``unavailable``."""
    configured = servers.servers
    wanted = list(names if names is not None else sorted(configured))
    listed: dict[str, dict[str, Any]] = {}
    task_only: dict[str, frozenset[str]] = {}
    unavailable: dict[str, str] = {}

    async def one(name: str) -> None:
        if name not in configured:
            unavailable[name] = f"not configured in {servers.source}"
            return
        try:
            async with open_hub(configured, [name], start_timeout=start_timeout) as hub:
                listed[name] = hub.tools(name)
                task_only[name] = hub.task_required(name)
        except BaseExceptionGroup as group:
            leaf = plain_error(group)
            unavailable[name] = _why(leaf if leaf is not None else group)
        except Exception as exc:  # noqa: BLE001 - a server that cannot start is reported, not fatal
            unavailable[name] = _why(exc)

    async with trio.open_nursery() as nursery:
        for name in wanted:
            nursery.start_soon(one, name)
    return Catalogue(listed, unavailable, servers.source, policy, task_only=task_only)


async def fetch_warm(pool: Any, servers: Any, policy: Any) -> Catalogue:
    """:func:`fetch` over the servers a long-lived process keeps warm (``recipe serve``'s
    ``service.ServerPool``): each is started once, if it is not running yet, and kept for
    the runs that follow; none is started again to be listed."""
    listed: dict[str, dict[str, Any]] = {}
    task_only: dict[str, frozenset[str]] = {}
    unavailable: dict[str, str] = {}

    async def one(name: str) -> None:
        try:
            hub = await pool.hub([name])
            try:
                await hub.wait_ready()
                listed[name] = hub.tools(name)
                task_only[name] = hub.task_required(name)
            finally:
                hub.release()
        except BaseExceptionGroup as group:
            leaf = plain_error(group)
            unavailable[name] = _why(leaf if leaf is not None else group)
        except Exception as exc:  # noqa: BLE001 - a server that cannot start is reported, not fatal
            unavailable[name] = _why(exc)

    async with trio.open_nursery() as nursery:
        for name in sorted(servers.servers):
            nursery.start_soon(one, name)
    return Catalogue(listed, unavailable, servers.source, policy, task_only=task_only)


def _why(exc: BaseException) -> str:
    if isinstance(exc, VodouError):
        return exc.message.splitlines()[0]
    return f"{type(exc).__name__}: {exc}".splitlines()[0]
